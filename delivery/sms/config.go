package sms

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tidings-go/tidings/delivery/internal/httpcall"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// BaseURLDefault is the default of [Config.BaseURL]: Twilio's REST API.
const BaseURLDefault = "https://api.twilio.com"

// TimeoutDefault is the default of [Config.Timeout]: how long one call to
// Twilio may take.
const TimeoutDefault = 10 * time.Second

// Config configures a [Delivery]. AccountSID, AuthToken, one of From and
// MessagingServiceSID, and Templates are required; the zero value of every
// other field means its default. New copies what it needs: changing a
// Config after New has no effect on the Delivery.
type Config struct {
	// BaseURL is where Twilio's REST API is, without a trailing path, such
	// as "https://api.twilio.com" (the default, BaseURLDefault) or a test
	// server's URL. It must be an absolute http or https URL without a
	// query.
	BaseURL string

	// AccountSID is the Twilio account ("AC" and 32 hex digits): the
	// account in the Messages URL and the user name of HTTP basic auth.
	// Required.
	AccountSID string

	// AuthToken is the account's auth token, the password of HTTP basic
	// auth. Required. It is never put into an error or a reason.
	AuthToken string

	// From is the sender: a phone number in E.164 form, a short code or an
	// alphanumeric sender id, sent as Twilio's From parameter. Exactly one
	// of From and MessagingServiceSID is required.
	From string

	// MessagingServiceSID is a Twilio Messaging Service ("MG" and 32 hex
	// digits) that picks the sender, sent as MessagingServiceSid. Exactly
	// one of From and MessagingServiceSID is required.
	MessagingServiceSID string

	// StatusCallback, when set, is the absolute http or https URL Twilio
	// posts each message's status changes to, sent with every message as
	// StatusCallback: the URL of the feedback.NewTwilio receiver (its
	// TwilioConfig.URL, which Twilio signs). Without it Twilio posts
	// statuses only for a Messaging Service that has a callback of its
	// own, so with From no undelivered text or unknown number is ever
	// reported. It may carry credentials: no error quotes it.
	StatusCallback string

	// Templates holds the messages the application can send: name to the
	// body's [text/template] source, rendered with the request's
	// [delivery.Pending.Data] as dot. At least one is required, and none
	// may be empty. New parses each once; one that does not parse is an
	// error of New, naming it.
	Templates map[string]string

	// Timeout bounds one call to Twilio, on top of the deadline of the
	// context Deliver gets, and is the Timeout of the default HTTPClient.
	// Zero means TimeoutDefault; negative is an error.
	Timeout time.Duration

	// HTTPClient sends the calls. Nil (the default) means a client of its
	// own with Timeout that does not follow redirects. A given client is
	// used as is, shared, and never closed by the Delivery; Timeout still
	// bounds each call.
	HTTPClient *http.Client
}

var (
	// accountSIDPattern is a Twilio account SID.
	accountSIDPattern = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)
	// serviceSIDPattern is a Twilio Messaging Service SID.
	serviceSIDPattern = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`)
)

// settings is a validated Config with its defaults applied.
type settings struct {
	endpoint   string // the Messages URL
	accountSID string
	authToken  string
	from       string
	serviceSID string
	callback   string // StatusCallback
	caller     httpcall.Caller
	templates  map[string]*render.Template
}

// validate checks cfg and returns its settings, or every problem found,
// joined, each naming its field. No error quotes AuthToken.
func (cfg *Config) validate() (*settings, error) {
	if cfg == nil {
		return nil, errors.New("sms: Config is nil: AccountSID, AuthToken, From or MessagingServiceSID, and Templates are required")
	}
	s := &settings{
		accountSID: cfg.AccountSID,
		authToken:  cfg.AuthToken,
		from:       cfg.From,
		serviceSID: cfg.MessagingServiceSID,
		callback:   cfg.StatusCallback,
		caller: httpcall.Caller{
			Name:        "sms",
			Client:      cfg.HTTPClient,
			TimeoutText: "sms: twilio took longer than Config.Timeout",
		},
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("sms: "+format, args...))
	}

	// The URL is not quoted: it may carry credentials.
	base, ok := httpcall.BaseURL(cmp.Or(cfg.BaseURL, BaseURLDefault))
	if !ok {
		fail("Config.BaseURL is not an absolute http or https URL without a query")
	}

	switch {
	case cfg.AccountSID == "":
		fail("Config.AccountSID is required")
	case !accountSIDPattern.MatchString(cfg.AccountSID):
		fail("Config.AccountSID is not a Twilio account SID (AC and 32 hex digits)")
	default:
		s.endpoint = base + "/2010-04-01/Accounts/" + cfg.AccountSID + "/Messages.json"
	}
	if cfg.AuthToken == "" {
		fail("Config.AuthToken is required")
	}

	switch {
	case cfg.From == "" && cfg.MessagingServiceSID == "":
		fail("Config.From or Config.MessagingServiceSID is required")
	case cfg.From != "" && cfg.MessagingServiceSID != "":
		fail("Config.From and Config.MessagingServiceSID are both set: set one")
	case cfg.MessagingServiceSID != "" && !serviceSIDPattern.MatchString(cfg.MessagingServiceSID):
		fail("Config.MessagingServiceSID %q is not a Messaging Service SID (MG and 32 hex digits)", cfg.MessagingServiceSID)
	case strings.ContainsFunc(cfg.From, func(r rune) bool { return r < ' ' || r == 0x7f }):
		fail("Config.From contains a control character")
	}

	if cfg.StatusCallback != "" {
		if u, err := url.Parse(cfg.StatusCallback); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail("Config.StatusCallback is not an absolute http or https URL")
		}
	}

	if err := s.caller.Configure(cfg.Timeout, TimeoutDefault); err != nil {
		errs = append(errs, err)
	}

	if len(cfg.Templates) == 0 {
		fail("Config.Templates is empty: register at least one template")
	}
	s.templates = make(map[string]*render.Template, len(cfg.Templates))
	for _, name := range slices.Sorted(maps.Keys(cfg.Templates)) { // errors in a stable order
		src := cfg.Templates[name]
		switch {
		case name == "":
			fail("Config.Templates: a template's name is empty")
		case src == "":
			fail("Config.Templates[%q] is empty", name)
		default:
			t, err := render.Parse(name, "body", src)
			if err != nil {
				fail("Config.Templates[%q]: %v", name, err)
				continue
			}
			s.templates[name] = t
		}
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}
