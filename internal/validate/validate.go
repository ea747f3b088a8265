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

// Text checks that s is stored as it is: no NUL byte, which PostgreSQL's
// text and jsonb cannot store, and valid UTF-8, which a JSON encoder would
// otherwise change (another recipient than the one given, say).
func Text(field, s string) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s holds a NUL character, which PostgreSQL cannot store", field)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8: it would be stored changed", field)
	}
	return nil
}

// Year checks a time that is stored as JSON: zero, or from 1970 to the end
// of the year 9999, past which JSON has no form for it.
func Year(field string, t time.Time) error {
	switch {
	case t.IsZero():
		return nil
	case t.Before(notBeforeMin):
		return fmt.Errorf("%s is before 1970", field)
	case t.Year() > 9999:
		return fmt.Errorf("%s is after the year 9999", field)
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

// JSONStorable reports whether valid JSON is one PostgreSQL's jsonb takes:
// valid UTF-8, no escape \u0000, and every UTF-16 surrogate escape one of
// a pair, a high one then a low one. Go's encoder writes such JSON from
// Go values; a json.RawMessage or a MarshalJSON method can write anything.
// In valid JSON a backslash begins an escape and occurs nowhere else.
func JSONStorable(payload []byte) bool {
	if !utf8.Valid(payload) {
		return false
	}
	for i := 0; ; {
		j := bytes.IndexByte(payload[i:], '\\')
		if j < 0 {
			return true
		}
		i += j + 1 // the escaped character
		if payload[i] != 'u' {
			i++
			continue
		}
		r := hex4(payload[i+1 : i+5])
		i += 5
		switch {
		case r == 0, 0xDC00 <= r && r < 0xE000:
			return false
		case 0xD800 <= r && r < 0xDC00:
			// A low surrogate must follow.
			if i+6 > len(payload) || payload[i] != '\\' || payload[i+1] != 'u' {
				return false
			}
			if low := hex4(payload[i+2 : i+6]); low < 0xDC00 || low >= 0xE000 {
				return false
			}
			i += 6
		}
	}
}

// hex4 is the value of four hexadecimal digits, as a JSON \u escape has.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
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
