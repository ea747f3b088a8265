package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// signatureVersion is the Standard Webhooks identifier of HMAC-SHA256
// signatures; asymmetric ones ("v1a") and any others are ignored.
const signatureVersion = "v1"

// secretBytesNew is the key length of NewSecret: 256 bits.
const secretBytesNew = 32

// NewSecret returns a fresh random secret in the form [Config.Secrets] and
// [Verify] take: [SecretPrefix] followed by 32 random bytes in standard
// base64. Give it to the receiver over a channel you trust, and store it
// as you store passwords.
func NewSecret() string {
	key := make([]byte, secretBytesNew)
	_, _ = rand.Read(key) // never fails: crypto/rand crashes the program instead
	return SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// Sign returns the webhook-signature header value for the message id sent
// at timestamp with body: one "v1,<base64 HMAC-SHA256>" per secret, in the
// order of secrets, separated by spaces. What is signed is
// "{id}.{unix seconds}.{body}", byte for byte: send body exactly as
// signed.
//
// Deliver signs with this same function. Sign is for tests and for
// applications that send such requests themselves. It returns an
// [ErrInvalidSecret] error for a bad or missing secret, an
// [ErrMissingHeaders] error for an empty id, an [ErrSignature] error for an
// id that contains a '.' (which Verify rejects), and an [ErrTimestamp] error
// for a time before 1970.
func Sign(secrets []string, id string, timestamp time.Time, body []byte) (string, error) {
	keys, err := parseSecrets("secrets", secrets)
	if err != nil {
		return "", err
	}
	if err := checkID(id); err != nil {
		return "", err
	}
	ts := timestamp.Unix()
	if ts < 0 {
		return "", fmt.Errorf("%w: the timestamp is before 1970", ErrTimestamp)
	}
	return sign(keys, id, strconv.FormatInt(ts, 10), body), nil
}

// sign returns the webhook-signature value of the message under each key.
func sign(keys [][]byte, id, timestamp string, body []byte) string {
	var b strings.Builder
	for i, key := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(signatureVersion)
		b.WriteByte(',')
		b.Write(mac(key, id, timestamp, body))
	}
	return b.String()
}

// mac returns the base64 HMAC-SHA256 of "{id}.{timestamp}.{body}" under
// key.
func mac(key []byte, id, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	sum := h.Sum(nil)
	out := make([]byte, base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(out, sum)
	return out
}

// checkID returns an error for a message id Verify cannot trust: an empty
// one, or one with a '.'. The timestamp is digits only, so with a dot-free
// id "{id}.{timestamp}.{body}" splits one way only, and a signature over
// one message cannot be presented as another's.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", ErrMissingHeaders, HeaderID)
	}
	if strings.Contains(id, ".") {
		return fmt.Errorf("%w: %s contains '.', which makes the signed content ambiguous", ErrSignature, HeaderID)
	}
	return nil
}

// Verify checks a Standard Webhooks request, as a receiver does before it
// acts on one: header is the request's header, body its body exactly as
// received (not parsed and re-encoded), now the receiver's clock and
// tolerance how far the request's webhook-timestamp may be from now, in
// either direction; zero or negative means [ToleranceDefault].
//
// It returns nil when the webhook-id, webhook-timestamp and
// webhook-signature headers are present, the timestamp is within the
// tolerance, and at least one v1 signature in webhook-signature matches
// the message under at least one of secrets. Signatures of other versions
// (such as "v1a") and entries that do not parse are ignored; entries may be
// separated by any run of spaces, and the header may be repeated.
// Otherwise it returns an error wrapping [ErrMissingHeaders],
// [ErrTimestamp] or [ErrSignature], or [ErrInvalidSecret] when a secret is
// not "whsec_" followed by the standard base64 encoding of 24 to 64 bytes
// or none is given. Every secret is checked: pass the current and the
// previous one while rotating.
//
// Signatures are compared with [hmac.Equal], in constant time. Verify does
// not remember messages: a valid request replayed within the tolerance
// verifies again. Deduplicate on webhook-id (see the package
// documentation). Headers are looked up as [http.Header.Get] does, and also
// under the exact lower-case names, for a header map not built by
// net/http. Verify is safe for concurrent use.
func Verify(secrets []string, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	keys, err := parseSecrets("secrets", secrets)
	if err != nil {
		return err
	}

	id := headerValue(header, HeaderID)
	timestamp := headerValue(header, HeaderTimestamp)
	signatures := headerValues(header, HeaderSignature)
	var missing []string
	if id == "" {
		missing = append(missing, HeaderID)
	}
	if timestamp == "" {
		missing = append(missing, HeaderTimestamp)
	}
	if strings.TrimSpace(strings.Join(signatures, "")) == "" {
		missing = append(missing, HeaderSignature)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingHeaders, strings.Join(missing, ", "))
	}

	ts, ok := parseTimestamp(timestamp)
	if !ok {
		return fmt.Errorf("%w: %s is not unix seconds", ErrTimestamp, HeaderTimestamp)
	}
	if tolerance <= 0 {
		tolerance = ToleranceDefault
	}
	switch age := now.Sub(time.Unix(ts, 0)); {
	case age > tolerance:
		return fmt.Errorf("%w: %s is %s old, more than the tolerance of %s", ErrTimestamp, HeaderTimestamp, age.Truncate(time.Second), tolerance)
	case age < -tolerance:
		return fmt.Errorf("%w: %s is %s ahead, more than the tolerance of %s", ErrTimestamp, HeaderTimestamp, (-age).Truncate(time.Second), tolerance)
	}

	if err := checkID(id); err != nil {
		return err
	}

	// What the receiver's secrets sign, in the sender's canonical form of
	// the timestamp.
	canonical := strconv.FormatInt(ts, 10)
	expected := make([][]byte, len(keys))
	for i, key := range keys {
		expected[i] = mac(key, id, canonical, body)
	}
	tried := 0
	for _, line := range signatures {
		for entry := range strings.FieldsSeq(line) {
			version, signature, ok := strings.Cut(entry, ",")
			if !ok || version != signatureVersion {
				continue
			}
			tried++
			for _, want := range expected {
				// Constant time: a comparison that stops at the first
				// difference would let a sender find a valid signature
				// byte by byte.
				if hmac.Equal([]byte(signature), want) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("%w: none of %d %s signatures matches under any of %d secrets", ErrSignature, tried, signatureVersion, len(keys))
}

// parseTimestamp reads unix seconds: 1 to 19 ASCII digits within int64.
func parseTimestamp(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	return ts, err == nil
}

// headerValues returns the values of the header name in h, under its
// canonical key or, failing that, its exact lower-case name.
func headerValues(h http.Header, name string) []string {
	if v := h.Values(name); len(v) > 0 {
		return v
	}
	return h[name]
}

// headerValue returns the first value of the header name in h, or "".
func headerValue(h http.Header, name string) string {
	if v := headerValues(h, name); len(v) > 0 {
		return v[0]
	}
	return ""
}
