package push

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/tidings-go/tidings/delivery/internal/httpcall"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// BaseURLDefault is the default of [Config.BaseURL]: Expo's push service.
const BaseURLDefault = "https://exp.host"

// TimeoutDefault is the default of [Config.Timeout]: how long one call to
// Expo may take.
const TimeoutDefault = 10 * time.Second

// sendPath is where Expo takes pushes, below BaseURL.
const sendPath = "/--/api/v2/push/send"

// Template is one notification the application can send, registered by
// name in [Config.Templates] and selected by [delivery.Pending.Template].
//
// Each field is a [text/template] source, rendered with the request's
// [delivery.Pending.Data] as dot. A reference to a value the request does
// not carry fails the delivery with a [*TemplateError] instead of showing
// "<no value>" on a lock screen.
type Template struct {
	// Title is the notification's title; optional: empty means none.
	Title string
	// Body is the notification's text; required.
	Body string
}

// Config configures a [Delivery]. Templates is required; the zero value of
// every other field means its default. New copies what it needs: changing
// a Config after New has no effect on the Delivery.
type Config struct {
	// BaseURL is where Expo's push service is, without a trailing path,
	// such as "https://exp.host" (the default, BaseURLDefault) or a test
	// server's URL. It must be an absolute http or https URL without a
	// query.
	BaseURL string

	// AccessToken is an Expo access token, sent as "Authorization: Bearer
	// <token>", for a project that requires one ("enhanced security for
	// push notifications"). Empty (the default) sends no Authorization
	// header. It is never put into an error or a reason.
	AccessToken string

	// Templates holds the notifications the application can send, by name.
	// At least one is required. New parses each once; one that does not
	// parse or has no Body is an error of New, naming it.
	Templates map[string]Template

	// Timeout bounds one call to Expo, on top of the deadline of the
	// context Deliver gets, and is the Timeout of the default HTTPClient.
	// Zero means TimeoutDefault; negative is an error.
	Timeout time.Duration

	// HTTPClient sends the calls. Nil (the default) means a client of its
	// own with Timeout that does not follow redirects. A given client is
	// used as is, shared, and never closed by the Delivery; Timeout still
	// bounds each call.
	HTTPClient *http.Client
}

// accessTokenPattern is what a bearer token may be: printable ASCII
// without spaces.
var accessTokenPattern = regexp.MustCompile(`^[\x21-\x7e]+$`)

// settings is a validated Config with its defaults applied.
type settings struct {
	endpoint    string
	accessToken string
	caller      httpcall.Caller
	templates   map[string]*parsedTemplate
}

// parsedTemplate is a Template parsed once, in New.
type parsedTemplate struct {
	title *render.Template // nil when the Template has no Title
	body  *render.Template
}

// validate checks cfg and returns its settings, or every problem found,
// joined, each naming its field. No error quotes AccessToken.
func (cfg *Config) validate() (*settings, error) {
	if cfg == nil {
		return nil, errors.New("push: Config is nil: Templates is required")
	}
	s := &settings{
		accessToken: cfg.AccessToken,
		caller: httpcall.Caller{
			Name:        "push",
			Client:      cfg.HTTPClient,
			TimeoutText: "push: expo took longer than Config.Timeout",
		},
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("push: "+format, args...))
	}

	// The URL is not quoted: it may carry credentials.
	if base, ok := httpcall.BaseURL(cmp.Or(cfg.BaseURL, BaseURLDefault)); !ok {
		fail("Config.BaseURL is not an absolute http or https URL without a query")
	} else {
		s.endpoint = base + sendPath
	}

	if cfg.AccessToken != "" && !accessTokenPattern.MatchString(cfg.AccessToken) {
		fail("Config.AccessToken contains a space, a control or a non-ASCII character")
	}

	if err := s.caller.Configure(cfg.Timeout, TimeoutDefault); err != nil {
		errs = append(errs, err)
	}

	if len(cfg.Templates) == 0 {
		fail("Config.Templates is empty: register at least one template")
	}
	s.templates = make(map[string]*parsedTemplate, len(cfg.Templates))
	for _, name := range slices.Sorted(maps.Keys(cfg.Templates)) { // errors in a stable order
		t := cfg.Templates[name]
		field := fmt.Sprintf("Config.Templates[%q]", name)
		if name == "" {
			fail("Config.Templates: a template's name is empty")
			continue
		}
		p := &parsedTemplate{}
		var err error
		if t.Title != "" {
			if p.title, err = render.Parse(name, "title", t.Title); err != nil {
				fail("%s.Title: %v", field, err)
			}
		}
		if t.Body == "" {
			fail("%s.Body is empty", field)
		} else if p.body, err = render.Parse(name, "body", t.Body); err != nil {
			fail("%s.Body: %v", field, err)
		}
		s.templates[name] = p
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}
