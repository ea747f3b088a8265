package service

import (
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The API's bounds on what it stores, in bytes.
const (
	// idMaxLen bounds a user id: the dedup keys of its notifications
	// ("booking-<id>/confirmed/<user id>/<channel>") must stay within
	// notification.DedupKeyMaxLen.
	idMaxLen = 64
	// textMaxLen bounds a name, a place and a push token.
	textMaxLen = 200
	// emailMaxLen is the longest address SMTP carries (RFC 5321, 4.5.3.1.3).
	emailMaxLen = 254
)

// foreignKeyViolation is PostgreSQL's SQLSTATE for a reference to a row
// that does not exist.
const foreignKeyViolation = "23503"

var (
	// idPattern is a user id: a letter or a digit, then letters, digits,
	// '.', '_' and '-'.
	idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// phonePattern is a phone number in E.164 form, as Twilio takes it.
	phonePattern = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)
)

// checkID checks a required user id: at most idMaxLen bytes of idPattern.
// The error names field.
func checkID(field, id string) error {
	if err := checkText(field, id, true, idMaxLen); err != nil {
		return err
	}
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%s: may hold only letters, digits, '.', '_' and '-', and must begin with a letter or a digit", field)
	}
	return nil
}

// checkText checks free text: at most maxLen bytes of valid UTF-8, every
// rune printable (no NUL, which PostgreSQL's text cannot hold, and no other
// control character), and not empty when required. The error names field.
func checkText(field, s string, required bool, maxLen int) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%s: is required", field)
	case len(s) > maxLen:
		return fmt.Errorf("%s: is %d bytes long, at most %d allowed", field, len(s), maxLen)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("%s: has a control character or invalid UTF-8", field)
	}
	return nil
}

// checkEmail checks an optional mail address: empty, or one bare address
// ("ada@example.com", no display name). The error names field.
func checkEmail(field, email string) error {
	if err := checkText(field, email, false, emailMaxLen); err != nil || email == "" {
		return err
	}
	if a, err := mail.ParseAddress(email); err != nil || a.Address != email {
		return fmt.Errorf("%s: is not a mail address such as ada@example.com", field)
	}
	return nil
}

// checkPhone checks an optional phone number: empty, or E.164. The error
// names field.
func checkPhone(field, phone string) error {
	if phone != "" && !phonePattern.MatchString(phone) {
		return fmt.Errorf("%s: is not a number in E.164 form, such as +14155550100", field)
	}
	return nil
}
