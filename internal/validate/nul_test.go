package validate

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzJSONStorable checks JSONStorable against what decoding the JSON
// shows: what it takes is valid UTF-8 with no NUL in any string or key,
// and it takes all of that unless the JSON escapes a surrogate, which the
// decoder turns into U+FFFD when it is alone (TestJSONStorable asks
// PostgreSQL about those).
func FuzzJSONStorable(f *testing.F) {
	for _, seed := range []string{
		`{"a":"x"}`,
		`{"a":"\u0000"}`,       // a NUL
		`{"a":"\\u0000"}`,      // an escaped backslash, then text
		`{"a":"\\\u0000"}`,     // a backslash, then a NUL
		`{"\u0000":1}`,         // a NUL in a key
		`["\\\\u0000", "ok"]`,  // two escaped backslashes, then text
		`{"a":"\ud83d\ude00"}`, // a pair
		`{"a":"\ud800"}`,       // a high surrogate alone
		`{"a":"\udc00\ud800"}`, // a pair the wrong way round
		`{"a":"\ud800\u0041"}`, // a high surrogate, then no low one
		"{\"a\":\"\xff\"}",     // invalid UTF-8
	} {
		f.Add([]byte(seed))
	}
	surrogate := regexp.MustCompile(`\\u[dD][89a-fA-F]`)
	f.Fuzz(func(t *testing.T, payload []byte) {
		var v any
		if json.Unmarshal(payload, &v) != nil {
			return
		}
		clean := utf8.Valid(payload) && !containsNUL(v)
		if JSONStorable(payload) {
			require.True(t, clean, "%s", payload)
		} else if !surrogate.Match(payload) {
			require.False(t, clean, "%s", payload)
		}
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
