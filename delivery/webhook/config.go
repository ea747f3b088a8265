package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tidings-go/tidings/delivery/internal/httpcall"
)

const (
	// TimeoutDefault is the default of [Config.Timeout]: how long one call
	// to the endpoint may take, from dial to the end of the answer.
	TimeoutDefault = 10 * time.Second

	// ToleranceDefault is the tolerance [Verify] uses when given 0: how far
	// webhook-timestamp may be from the receiver's clock, either way.
	ToleranceDefault = 5 * time.Minute

	// UserAgentDefault is the default of [Config.UserAgent].
	UserAgentDefault = "tidings-webhook"

	// SecretPrefix starts every secret, as Standard Webhooks writes
	// symmetric keys: "whsec_" followed by the key in standard base64.
	SecretPrefix = "whsec_"

	// SecretBytesMin and SecretBytesMax bound the length of a secret's key,
	// after base64 decoding, as Standard Webhooks asks: 24 to 64 bytes.
	SecretBytesMin = 24
	SecretBytesMax = 64
)

// The headers of a Standard Webhooks request, in the spelling of the
// specification. HTTP header names are case-insensitive; [http.Header]
// stores them canonicalised ("Webhook-Id").
const (
	// HeaderID carries the message id: the request's [delivery.Pending.ID],
	// the same on every attempt. Receivers deduplicate on it.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the attempt's time in unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries the space-separated signatures, "v1,<base64>"
	// each, one per secret.
	HeaderSignature = "webhook-signature"
	// HeaderCorrelationID carries the request's correlation id, when it has
	// one that is a valid header value. It is not signed.
	HeaderCorrelationID = "tidings-correlation-id"
)

// Config configures a [Delivery]. Secrets is required; the zero value of
// every other field means its default. New copies what it needs: changing
// a Config after New has no effect on the Delivery.
type Config struct {
	// Secrets are the signing secrets, each "whsec_" followed by the
	// standard base64 encoding of a key of 24 to 64 bytes (such as one
	// [NewSecret] returns). At least one is required. Every request is
	// signed with every secret, so that a receiver can rotate: add the new
	// secret here, let the receiver switch to it, then remove the old one.
	Secrets []string

	// Timeout bounds one call to the endpoint, on top of the deadline of
	// the context Deliver gets. Zero means TimeoutDefault; negative is an
	// error.
	Timeout time.Duration

	// HTTPClient makes the calls. Nil means a client of the package's own
	// on [http.DefaultTransport]. A given client is copied and redirects
	// are never followed (a 3xx is an answer, and a Retry), whatever its
	// CheckRedirect says; its Transport, Jar and Timeout are used as they
	// are. The Delivery does not own the client: it never closes its idle
	// connections.
	//
	// Recipients name the URLs this module calls, so calls can reach
	// internal services (server-side request forgery). When recipients are
	// not trusted, give a client whose Transport refuses internal
	// addresses (a net.Dialer with a Control function, or an egress proxy
	// such as smokescreen).
	HTTPClient *http.Client

	// AllowInsecure allows http:// recipient URLs on any host. By default
	// (false) a recipient must be https, except on a loopback host
	// ("localhost", 127.0.0.0/8, ::1), which may be http: a sidecar or a
	// test server.
	AllowInsecure bool

	// UserAgent is the User-Agent header of every call. Empty means
	// UserAgentDefault. It must be printable ASCII.
	UserAgent string
}

// settings is a validated Config with its defaults applied.
type settings struct {
	keys          [][]byte
	caller        httpcall.Caller
	allowInsecure bool
	userAgent     string
}

// validate checks cfg and returns its settings, or every problem found,
// joined, each naming its field and never a secret.
func (cfg *Config) validate() (*settings, error) {
	if cfg == nil {
		return nil, fmt.Errorf("webhook: Config is nil: Config.Secrets is required: %w", ErrInvalidSecret)
	}
	var errs []error
	s := &settings{
		caller: httpcall.Caller{
			Name:        "webhook",
			Timeout:     cfg.Timeout,
			TimeoutText: "webhook: no answer within Config.Timeout",
			StatusOnly:  true,
		},
		allowInsecure: cfg.AllowInsecure,
		userAgent:     cfg.UserAgent,
	}

	keys, err := parseSecrets("Config.Secrets", cfg.Secrets)
	if err != nil {
		errs = append(errs, err)
	}
	s.keys = keys

	switch {
	case cfg.Timeout < 0:
		errs = append(errs, fmt.Errorf("webhook: Config.Timeout is negative: %s", cfg.Timeout))
	case cfg.Timeout == 0:
		s.caller.Timeout = TimeoutDefault
	}

	if s.userAgent == "" {
		s.userAgent = UserAgentDefault
	} else if !validHeaderValue(s.userAgent) {
		errs = append(errs, errors.New("webhook: Config.UserAgent is not printable ASCII"))
	}

	client := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		client = &c
	}
	// Standard Webhooks counts a 3xx as a failure, and following one could
	// take a signed request to a host the recipient did not name.
	client.CheckRedirect = httpcall.NoRedirect
	s.caller.Client = client

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// parseSecrets decodes secrets, which field names in errors. It needs at
// least one, and reports every bad one by position only.
func parseSecrets(field string, secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: %s is empty: at least one secret is required", ErrInvalidSecret, field)
	}
	keys := make([][]byte, 0, len(secrets))
	var errs []error
	for i, secret := range secrets {
		key, problem := parseSecret(secret)
		if problem != "" {
			errs = append(errs, fmt.Errorf("%w: %s[%d] %s", ErrInvalidSecret, field, i, problem))
			continue
		}
		keys = append(keys, key)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return keys, nil
}

// parseSecret decodes one secret, or says what is wrong with it without
// quoting it.
func parseSecret(secret string) (key []byte, problem string) {
	encoded, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, "does not start with " + SecretPrefix
	}
	key, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil {
		// The decoder's error names an offset only, but say less still.
		return nil, "is not " + SecretPrefix + " followed by standard base64"
	}
	if len(key) < SecretBytesMin || len(key) > SecretBytesMax {
		return nil, fmt.Sprintf("has a key of %d bytes, not %d to %d", len(key), SecretBytesMin, SecretBytesMax)
	}
	return key, ""
}

// validHeaderValue reports whether v is non-empty printable ASCII, which
// every HTTP stack passes on unchanged.
func validHeaderValue(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}
