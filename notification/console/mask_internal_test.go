package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMask(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ada@drivers.example":           "a***@drivers.example",
		"élodie@example.com":            "é***@example.com",
		"@example.com":                  "***@example.com",
		"a@b@example.com":               "a***@example.com",
		"+14155550100":                  "+1415*****00",
		"+1 (415) 555-0100":             "+1415*****00",
		"0612345678":                    "0612****78",
		"5550100":                       "*****00",
		"555010":                        "***",
		"ExponentPushToken[ada-device]": "Exp***e]",
		"user-7":                        "***",
		// A webhook's endpoint: its user info, path and query may hold
		// credentials, even after an @.
		"https://ops:tok3n@hooks.example.com/services/T0/B0/SECRETXYZ":    "https://hooks.example.com/***",
		"https://hooks.example.com/in?email=ada@example.com&token=s3cr3t": "https://hooks.example.com/***",
		"http://127.0.0.1:8080/hook":                                      "http://127.0.0.1:8080/***",
		"see ada@example.com/path?token=s3cr3t":                           "see***3t",
		"":                                                                "***",
	} {
		require.Equal(t, want, mask(in), "mask(%q)", in)
	}
}
