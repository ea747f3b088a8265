package console

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// mask hides most of a recipient, keeping what lets an operator tell two
// apart without reading either: a URL's scheme and host
// (https://hooks.example.com/***; its user info, path and query can hold
// credentials), an address's first character and its domain
// (a***@example.com), a phone number's country and area code and its last
// two digits (+1415*****00, one star a digit), and the first three and
// last two characters of anything else (a push token, a user id), or
// nothing of it when it has fewer than ten.
func mask(recipient string) string {
	if u, err := url.Parse(recipient); err == nil && strings.Contains(recipient, "://") && u.Host != "" {
		return u.Scheme + "://" + u.Host + "/***"
	}
	if local, domain, ok := cutLast(recipient, "@"); ok && !strings.ContainsAny(domain, "/?#&=:; ") {
		first, _ := utf8.DecodeRuneInString(local)
		if local == "" {
			return "***@" + domain
		}
		return string(first) + "***@" + domain
	}
	if digits, ok := phone(recipient); ok {
		keep := 0
		if len(digits) >= 10 {
			keep = 4
		}
		var b strings.Builder
		if strings.HasPrefix(recipient, "+") {
			b.WriteByte('+')
		}
		b.WriteString(digits[:keep])
		b.WriteString(strings.Repeat("*", len(digits)-keep-2))
		b.WriteString(digits[len(digits)-2:])
		return b.String()
	}
	r := []rune(recipient)
	if len(r) < 10 {
		return "***"
	}
	return string(r[:3]) + "***" + string(r[len(r)-2:])
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// phone returns the digits of s and true when s is a phone number: an
// optional "+", then at least seven digits, with spaces, dots, dashes and
// parentheses between them.
func phone(s string) (string, bool) {
	var digits strings.Builder
	for i, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits.WriteRune(c)
		case c == '+' && i == 0, strings.ContainsRune(" .-()", c):
		default:
			return "", false
		}
	}
	return digits.String(), digits.Len() >= 7
}
