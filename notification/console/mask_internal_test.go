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
		"":                              "***",
	} {
		require.Equal(t, want, mask(in), "mask(%q)", in)
	}
}
