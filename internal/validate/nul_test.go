package validate

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzHasNUL checks JSONHasNUL against a reference: decode the JSON and look for
// a NUL in every string and key.
func FuzzHasNUL(f *testing.F) {
	for _, seed := range []string{
		`{"a":"x"}`,
		`{"a":"\u0000"}`,      // a NUL
		`{"a":"\\u0000"}`,     // an escaped backslash, then text
		`{"a":"\\\u0000"}`,    // a backslash, then a NUL
		`{"\u0000":1}`,        // a NUL in a key
		`["\\\\u0000", "ok"]`, // two escaped backslashes, then text
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var v any
		if json.Unmarshal(payload, &v) != nil {
			return
		}
		require.Equal(t, containsNUL(v), JSONHasNUL(payload), "%s", payload)
	})
}

func containsNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if containsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || containsNUL(e) {
				return true
			}
		}
	}
	return false
}

// FuzzStorable checks that Storable's answer holds no NUL and is valid
// UTF-8, and that it leaves alone what already was.
func FuzzStorable(f *testing.F) {
	for _, seed := range []string{"ok", "a\x00b", "cut \xe2\x82", "\xff\xfe", "é\x00\xc3"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Storable(s)
		require.True(t, utf8.ValidString(got), "%q gave %q", s, got)
		require.NotContains(t, got, "\x00", "%q", s)
		if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
			require.Equal(t, s, got)
		}
	})
}
