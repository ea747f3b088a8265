// Package validate holds the checks that staging applies at the library's
// boundary, shared by relay (records) and notification (requests). Each
// returns an error that names the field it was given and quotes no value,
// since values may be personal data; callers wrap it with their own
// sentinel (relay.ErrInvalidMessage, notification.ErrInvalidRequest).
package validate

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// NotBeforeMax is how far ahead of now a scheduled time may be.
const NotBeforeMax = 366 * 24 * time.Hour

// notBeforeMin is the earliest scheduled time accepted: anything before
// it is a zero-like or corrupt time, not a schedule.
var notBeforeMin = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// NotBefore checks a scheduled time: zero (as soon as possible), or from
// 1970 up to NotBeforeMax after now. A time in the past means "due now".
func NotBefore(field string, t, now time.Time) error {
	switch {
	case t.IsZero():
		return nil
	case t.Before(notBeforeMin):
		return fmt.Errorf("%s is before 1970: not a time to schedule at", field)
	case t.After(now.Add(NotBeforeMax)):
		return fmt.Errorf("%s is more than %s ahead: an outbox is no calendar; keep such schedules in your own tables",
			field, NotBeforeMax)
	}
	return nil
}

// NoNUL checks that s holds no NUL byte, which PostgreSQL's text and jsonb
// cannot store.
func NoNUL(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s holds a NUL character, which PostgreSQL cannot store", field)
	}
	return nil
}

// Storable returns s as PostgreSQL's text can store it: each NUL byte and
// each run of invalid UTF-8 replaced by U+FFFD. For text the library
// writes whatever it holds, such as a sink's reason for an outcome, which
// may quote a provider's answer cut anywhere.
func Storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Printable checks that s is at most max bytes of valid UTF-8, every rune
// printable (unicode.IsPrint: no control or format character, no space
// but U+0020).
func Printable(field, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%s is %d bytes long, at most %d allowed", field, len(s), max)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("%s has a control character or invalid UTF-8", field)
	}
	return nil
}

// JSONHasNUL reports whether valid JSON holds the escape \u0000: a
// "\u0000" preceded by an even number of backslashes (an odd one escapes
// the backslash instead).
func JSONHasNUL(payload []byte) bool {
	for i := 0; ; {
		j := bytes.Index(payload[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		at := i + j
		backslashes := 0
		for k := at - 1; k >= 0 && payload[k] == '\\'; k-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return true
		}
		i = at + 1
	}
}

// NotNil checks that v, an interface argument such as a transaction, is
// neither nil nor a typed nil pointer, map, func or channel.
func NotNil(field string, v any) error {
	if v == nil {
		return fmt.Errorf("%s is nil", field)
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.Slice:
		if r.IsNil() {
			return fmt.Errorf("%s is a nil %s", field, r.Type())
		}
	}
	return nil
}
