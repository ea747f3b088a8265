package feedback

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1" // SNS signature version 1 is SHA1withRSA.
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// The SNS message types a receiver takes.
const (
	snsNotification         = "Notification"
	snsSubscriptionConfirm  = "SubscriptionConfirmation"
	snsUnsubscribeConfirmed = "UnsubscribeConfirmation"
)

// snsMessage is the JSON body SNS posts to an HTTP(S) subscription
// (https://docs.aws.amazon.com/sns/latest/dg/sns-message-and-json-formats.html).
type snsMessage struct {
	Type             string
	MessageID        string `json:"MessageId"`
	Token            string
	TopicArn         string
	Subject          *string
	Message          string
	Timestamp        string
	SignatureVersion string
	Signature        string
	SigningCertURL   string
	SubscribeURL     string
}

// parseSNSMessage decodes an SNS body. Any failure is ErrSignature: a body
// that is not an SNS message cannot be verified.
func parseSNSMessage(body []byte) (*snsMessage, error) {
	var m snsMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: the body is not an SNS message", ErrSignature)
	}
	switch m.Type {
	case snsNotification, snsSubscriptionConfirm, snsUnsubscribeConfirmed:
	default:
		return nil, fmt.Errorf("%w: the body is not an SNS message of a known Type", ErrSignature)
	}
	if m.MessageID == "" || m.TopicArn == "" || m.Timestamp == "" || m.Signature == "" || m.SigningCertURL == "" {
		return nil, fmt.Errorf("%w: the SNS message lacks a field its signature needs", ErrSignature)
	}
	return &m, nil
}

// snsStringToSign is the canonical string SNS signs for m: name and value
// pairs, each followed by a newline, in byte order of the names, as
// "Verifying the signatures of Amazon SNS messages" lists them
// (https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html).
func snsStringToSign(m *snsMessage) string {
	var b strings.Builder
	add := func(name, value string) {
		b.WriteString(name)
		b.WriteByte('\n')
		b.WriteString(value)
		b.WriteByte('\n')
	}
	add("Message", m.Message)
	add("MessageId", m.MessageID)
	if m.Type == snsNotification {
		if m.Subject != nil {
			add("Subject", *m.Subject)
		}
	} else {
		add("SubscribeURL", m.SubscribeURL)
	}
	add("Timestamp", m.Timestamp)
	if m.Type != snsNotification {
		add("Token", m.Token)
	}
	add("TopicArn", m.TopicArn)
	add("Type", m.Type)
	return b.String()
}

// snsHash returns the hash of signature version v: SHA1 for "1",
// SHA256 for "2".
func snsHash(version string, data []byte) (crypto.Hash, []byte, error) {
	switch version {
	case "1":
		sum := sha1.Sum(data) // the scheme's own hash
		return crypto.SHA1, sum[:], nil
	case "2":
		sum := sha256.Sum256(data)
		return crypto.SHA256, sum[:], nil
	}
	return 0, nil, fmt.Errorf("%w: SignatureVersion is neither 1 nor 2", ErrSignature)
}

// certCacheMax bounds how many signing certificates the cache holds. SNS
// signs with one certificate per region at a time.
const certCacheMax = 32

// certBodyMax bounds a signing certificate's size.
const certBodyMax = 64 << 10

// snsVerifier checks SNS messages: the URLs it fetches, the certificates
// it caches, the signatures.
type snsVerifier struct {
	hostPattern *regexp.Regexp
	client      *http.Client
	timeout     time.Duration

	mu    sync.Mutex
	certs map[string]*x509.Certificate // by SigningCertURL
}

// newSNSVerifier returns a verifier that fetches only from hosts
// matching hostPattern, with client, each fetch within timeout.
func newSNSVerifier(hostPattern *regexp.Regexp, client *http.Client, timeout time.Duration) *snsVerifier {
	return &snsVerifier{hostPattern: hostPattern, client: client, timeout: timeout, certs: map[string]*x509.Certificate{}}
}

// checkURL returns the URL if raw is an https URL on an allowed host,
// without user info; an error that never quotes raw.
func (v *snsVerifier) checkURL(raw, field string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || !v.hostPattern.MatchString(u.Host) {
		return nil, fmt.Errorf("%w: %s is not https on an allowed host", ErrCertificate, field)
	}
	return u, nil
}

// verify checks m's signature with the certificate its SigningCertURL
// serves, fetching it when it is not cached.
func (v *snsVerifier) verify(ctx context.Context, m *snsMessage, now time.Time) error {
	u, err := v.checkURL(m.SigningCertURL, "SigningCertURL")
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil {
		return fmt.Errorf("%w: Signature is not base64", ErrSignature)
	}
	hash, sum, err := snsHash(m.SignatureVersion, []byte(snsStringToSign(m)))
	if err != nil {
		return err
	}
	cert, err := v.certificate(ctx, u, now)
	if err != nil {
		return err
	}
	if err := rsa.VerifyPKCS1v15(cert.PublicKey.(*rsa.PublicKey), hash, sum, sig); err != nil {
		return fmt.Errorf("%w: the SNS signature does not match the certificate", ErrSignature)
	}
	return nil
}

// certificate returns the certificate at u from the cache, or fetches,
// checks and caches it.
func (v *snsVerifier) certificate(ctx context.Context, u *url.URL, now time.Time) (*x509.Certificate, error) {
	key := u.String()
	v.mu.Lock()
	cert, ok := v.certs[key]
	v.mu.Unlock()
	if ok && now.Before(cert.NotAfter) {
		return cert, nil
	}
	body, err := v.get(ctx, u, certBodyMax, ErrCertificateFetch, ErrCertificate)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: SigningCertURL serves no PEM certificate", ErrCertificate)
	}
	cert, err = x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: SigningCertURL serves a certificate that does not parse", ErrCertificate)
	}
	if _, ok := cert.PublicKey.(*rsa.PublicKey); !ok {
		return nil, fmt.Errorf("%w: the signing certificate's key is not RSA", ErrCertificate)
	}
	if now.Before(cert.NotBefore) || !now.Before(cert.NotAfter) {
		return nil, fmt.Errorf("%w: the signing certificate is not valid now", ErrCertificate)
	}
	v.mu.Lock()
	if len(v.certs) >= certCacheMax {
		clear(v.certs)
	}
	v.certs[key] = cert
	v.mu.Unlock()
	return cert, nil
}

// get fetches u within the verifier's timeout and returns at most limit
// bytes of its body. A request that fails, or a 5xx, is an error wrapping
// unavailable; any other status but 200 one wrapping refused. Errors
// never quote u, whose query can carry a token.
func (v *snsVerifier) get(ctx context.Context, u *url.URL, limit int64, unavailable, refused error) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: building the request", unavailable)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s failed", unavailable, u.Host)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	switch {
	case resp.StatusCode >= 500:
		return nil, fmt.Errorf("%w: %s answered %d", unavailable, u.Host, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: %s answered %d", refused, u.Host, resp.StatusCode)
	case err != nil:
		return nil, fmt.Errorf("%w: reading the answer of %s", unavailable, u.Host)
	}
	return body, nil
}
