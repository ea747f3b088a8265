package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidings-go/tidings/notification"
)

// SecretMinLen is the shortest Options.Secret accepted, in bytes.
const SecretMinLen = 32

// ErrOptions marks invalid Options; the error names the field.
var ErrOptions = errors.New("console: invalid options")

// Options configures the handler New returns. The zero value of each field
// means its default.
type Options struct {
	// BasePath is the path the handler is mounted at, such as
	// "/ops/tidings": it answers the paths below it, and its links and
	// forms start with it. Mount it with mux.Handle(BasePath+"/", h). ""
	// (the default) is the root.
	BasePath string

	// ReadOnly shows everything and changes nothing: no page has a form,
	// and every POST is answered 403 Forbidden.
	ReadOnly bool

	// ShowRecipients shows recipients as they are. By default every page
	// masks them (a***@example.com, +1415*****00).
	ShowRecipients bool

	// Secret keys the anti-forgery tokens of the forms, at least
	// SecretMinLen bytes: give the replicas of a service behind one load
	// balancer the same one. Nil means a random key of the handler's own,
	// so a form that another process or an earlier run rendered is
	// refused, with a page that says to reload it.
	Secret []byte

	// TrustedOrigins are origins ("https://ops.example.com") whose POSTs
	// are accepted besides the request's own host: for a proxy that
	// changes the Host header of what it forwards.
	TrustedOrigins []string

	// Logger receives the errors the pages answer 500 for (a database that
	// does not answer), which the pages do not show. Nil discards them.
	Logger *slog.Logger
}

// basePath is what Options.BasePath may be: "" or segments of unreserved
// characters, each after a slash.
var basePath = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)*$`)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// handler is what New returns.
type handler struct {
	client *notification.Client
	opts   Options
	guard  *guard
	pages  map[string]*template.Template // by file name
	mux    *http.ServeMux
}

// New returns the console of client. It checks opts, parses its templates
// and touches no database. The handler is safe for concurrent use; it does
// not own client.
func New(client *notification.Client, opts *Options) (http.Handler, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrOptions)
	}
	if !basePath.MatchString(o.BasePath) {
		return nil, fmt.Errorf("%w: BasePath %q: want \"\" or a path such as /ops/tidings, without a trailing slash",
			ErrOptions, o.BasePath)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Logger = o.Logger.With("component", "console")
	g, err := newGuard(o)
	if err != nil {
		return nil, err
	}
	h := &handler{client: client, opts: o, guard: g, pages: map[string]*template.Template{}}
	if err := h.parse(); err != nil {
		return nil, err
	}
	h.routes()
	return h, nil
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"when":     when,
	"duration": duration,
	"details":  details,
}

// parse parses each page with the layout.
func (h *handler) parse() error {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html")
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	for _, name := range names {
		if name == "templates/layout.html" {
			continue
		}
		t, err := layout.Clone()
		if err == nil {
			t, err = t.ParseFS(templateFiles, name)
		}
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		h.pages[name[len("templates/"):]] = t
	}
	return nil
}

// routes registers the pages, relative to the base path.
func (h *handler) routes() {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(assetFiles, "assets") // a directory it embeds: no error
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /dead", h.deadGroups)
	mux.HandleFunc("GET /dead/list", h.deadList)
	mux.HandleFunc("GET /requests/{id}", h.request)
	mux.HandleFunc("GET /search", h.search)
	mux.HandleFunc("GET /suppressions", h.suppressions)
	if h.opts.ReadOnly {
		mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
			h.fail(w, r, http.StatusForbidden, "This console is read-only: it changes nothing.")
		})
	} else {
		mux.HandleFunc("POST /dead/reemit", h.guarded(h.reemitDead))
		mux.HandleFunc("POST /requests/{id}/reemit", h.guarded(h.reemitOne))
		mux.HandleFunc("POST /requests/{id}/cancel", h.guarded(h.cancel))
		mux.HandleFunc("POST /suppressions/lift", h.guarded(h.lift))
	}
	h.mux = mux
}

// contentPolicy lets a page load only the console's own style sheet and
// script, post only to itself, and be framed by no one.
const contentPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP answers the paths below the base path.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := cutBase(r.URL.Path, h.opts.BasePath)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if rest == "" {
		http.Redirect(w, r, h.opts.BasePath+"/", http.StatusMovedPermanently)
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentPolicy)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if name, bad := notText(r.URL.Query()); bad {
		h.fail(w, r, http.StatusBadRequest, notTextMessage(name))
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = rest, ""
	h.mux.ServeHTTP(w, r2)
}

// paramName is a parameter name a page may repeat in its answer.
var paramName = regexp.MustCompile(`^[a-z_]{1,32}$`)

// notText returns the name of the first parameter of v, in name order,
// with a value the database cannot take as text: a NUL byte, or invalid
// UTF-8. A filter such as a code holding one would otherwise fail its
// statement and be logged as a database failure.
func notText(v url.Values) (name string, bad bool) {
	for _, k := range slices.Sorted(maps.Keys(v)) {
		for _, s := range v[k] {
			if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
				return k, true
			}
		}
	}
	return "", false
}

// notTextMessage is the page's text for a parameter notText found: it
// names the parameter when its name is one a page could have sent.
func notTextMessage(name string) string {
	if !paramName.MatchString(name) {
		name = "?"
	}
	return `The parameter "` + name + `" is not text: it holds a NUL byte or invalid UTF-8.`
}

// cutBase returns path without base, and whether path is base or below it.
func cutBase(path, base string) (string, bool) {
	if base == "" {
		return path, true
	}
	if len(path) < len(base) || path[:len(base)] != base || len(path) > len(base) && path[len(base)] != '/' {
		return "", false
	}
	return path[len(base):], true
}

// page is what every template gets.
type page struct {
	Base     string
	Title    string
	Nav      string // the current item of the navigation: overview, dead, suppressions, or none
	Token    string // the forms' anti-forgery token; "" in read-only mode
	ReadOnly bool
	Query    string // what the search box holds
	Flash    string // what the last change did
	Data     any
}

// render writes the page name with p, and status.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Base, p.ReadOnly = h.opts.BasePath, h.opts.ReadOnly
	if !h.opts.ReadOnly {
		p.Token = h.guard.token(w, r)
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		h.opts.Logger.ErrorContext(r.Context(), "render failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers status with a page that says msg, a fixed text that
// echoes nothing of the request.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error.html", page{Title: http.StatusText(status), Data: msg})
}

// failDB answers 500 for err, an error of the database, which it logs and
// does not show.
func (h *handler) failDB(w http.ResponseWriter, r *http.Request, err error) {
	h.opts.Logger.ErrorContext(r.Context(), "database failed", "path", r.URL.Path, "err", err)
	h.fail(w, r, http.StatusInternalServerError, "The outbox could not be read or changed: the service's log says why.")
}
