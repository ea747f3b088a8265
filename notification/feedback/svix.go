package feedback

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of Svix's scheme, which Resend signs its webhooks with.
const (
	SvixIDHeader        = "svix-id"
	SvixTimestampHeader = "svix-timestamp"
	SvixSignatureHeader = "svix-signature"
)

// svixSecretPrefix starts every Svix signing secret.
const svixSecretPrefix = "whsec_"

// svixKeyMin is the shortest key a Svix secret may decode to: Svix's own
// secrets are 24 bytes or longer.
const svixKeyMin = 16

// parseSvixSecret returns the HMAC key of a whsec_ secret, or a problem
// that never quotes the secret.
func parseSvixSecret(secret string) ([]byte, string) {
	rest, ok := strings.CutPrefix(secret, svixSecretPrefix)
	if !ok {
		return nil, "does not start with " + svixSecretPrefix
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, "is not base64 after " + svixSecretPrefix
	}
	if len(key) < svixKeyMin {
		return nil, fmt.Sprintf("is shorter than %d bytes", svixKeyMin)
	}
	return key, ""
}

// parseSvixSignatures returns the decoded v1 signatures of a
// svix-signature header: space-separated "v1,<base64>" entries, several
// during a rotation. Entries of other versions and entries that do not
// decode are left out.
func parseSvixSignatures(header string) [][]byte {
	var sigs [][]byte
	for _, entry := range strings.Fields(header) {
		b64, ok := strings.CutPrefix(entry, "v1,")
		if !ok {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) != sha256.Size {
			continue
		}
		sigs = append(sigs, sig)
	}
	return sigs
}

// svixSign is the v1 signature of the message id, timestamp and body with
// key: HMAC-SHA256 over "id.timestamp.body".
func svixSign(key []byte, id, timestamp string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// verifySvix checks a Svix-signed request at time now: the three headers
// are there, the timestamp is within tolerance of now both ways, and one
// of the header's signatures is the signature of one of keys. It returns
// the message id (svix-id), which is the event id.
//
// Svix documents the scheme under "Verifying Webhooks Manually"
// (https://docs.svix.com/receiving/verifying-payloads/how-manual).
func verifySvix(keys [][]byte, header http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	id := header.Get(SvixIDHeader)
	timestamp := header.Get(SvixTimestampHeader)
	signature := header.Get(SvixSignatureHeader)
	if err := requireHeaders(SvixIDHeader, id, SvixTimestampHeader, timestamp, SvixSignatureHeader, signature); err != nil {
		return "", err
	}
	t, err := parseUnix(timestamp)
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, SvixTimestampHeader)
	}
	if err := checkTimestamp(t, now, tolerance); err != nil {
		return "", fmt.Errorf("%w: %s", err, SvixTimestampHeader)
	}
	sigs := parseSvixSignatures(signature)
	for _, key := range keys {
		want := svixSign(key, id, timestamp, body)
		for _, sig := range sigs {
			if hmac.Equal(want, sig) {
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no v1 signature in %s matches a secret", ErrSignature, SvixSignatureHeader)
}

// requireHeaders takes pairs of header names and values and returns an
// ErrMissingHeader error naming every empty one, or nil.
func requireHeaders(pairs ...string) error {
	var missing []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if strings.TrimSpace(pairs[i+1]) == "" {
			missing = append(missing, pairs[i])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingHeader, strings.Join(missing, ", "))
	}
	return nil
}

// parseUnix reads a timestamp of unix seconds, digits only; an
// ErrTimestamp error when s is not one.
func parseUnix(s string) (time.Time, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return time.Time{}, fmt.Errorf("%w: not unix seconds", ErrTimestamp)
	}
	secs, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: not unix seconds", ErrTimestamp)
	}
	return time.Unix(secs, 0), nil
}

// checkTimestamp returns an ErrTimestamp error when t is more than
// tolerance before or after now.
func checkTimestamp(t, now time.Time, tolerance time.Duration) error {
	age := now.Sub(t)
	switch {
	case age > tolerance:
		return fmt.Errorf("%w: %s old, more than %s", ErrTimestamp, age.Truncate(time.Second), tolerance)
	case age < -tolerance:
		return fmt.Errorf("%w: %s ahead, more than %s", ErrTimestamp, (-age).Truncate(time.Second), tolerance)
	}
	return nil
}
