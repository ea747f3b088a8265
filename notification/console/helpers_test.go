package console_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/console"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
	"github.com/tidings-go/tidings/relay/relaytest"
	"github.com/tidings-go/tidings/retrypolicy"
)

const module = "bookings"

// invalidNumber is a phone number the provider double rejects until a
// test fixes its script.
const invalidNumber = "+15005550001"

type testBundle struct {
	db       *sql.DB
	schema   string
	client   *notification.Client
	delivery *recording.Delivery // every channel's
}

func setup(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, tidings.Migrate)
	db := pgtest.DB(t)
	client, err := notification.NewClient(db, &notification.ClientConfig{Schema: schema})
	require.NoError(t, err)
	return testBundle{db: db, schema: schema, client: client, delivery: recording.New()}
}

// run supervises a relay of the bundle's module, whose dispatcher
// delivers every channel through the bundle's recording, until the test
// ends.
func (b testBundle) run(t *testing.T, opts ...func(*relay.Config)) {
	t.Helper()
	d, err := notification.NewDispatcher(&notification.Config{
		Deliveries: map[string]delivery.Delivery{"mail": b.delivery, "sms": b.delivery, "push": b.delivery, "inapp": b.delivery},
		Policy:     retrypolicy.Policy{MaxAttempts: 2, BaseDelay: 20 * time.Millisecond, RandFunc: func() float64 { return 0 }},
	})
	require.NoError(t, err)
	cfg := relay.Config{
		Module: module, Schema: b.schema, Listener: pqlisten.New(pgtest.URL(t)),
		HandTimeout: 5 * time.Second, Lease: 10 * time.Second, SweepInterval: time.Hour, GracePeriod: 5 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	relaytest.Supervise(t, b.db, cfg, d)
}

// stage commits reqs, staged with ctx, and returns their ids.
func (b testBundle) stage(t *testing.T, ctx context.Context, reqs ...notification.Request) []uuid.UUID {
	t.Helper()
	ids, err := b.client.StageBatch(ctx, b.db, module, reqs)
	require.NoError(t, err)
	return ids
}

// settled waits until id is settled, and returns its status.
func (b testBundle) settled(t *testing.T, id uuid.UUID) notification.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testwait.Within)
	defer cancel()
	st, err := b.client.Wait(ctx, id)
	require.NoError(t, err, "waited for request %s to settle", id)
	return st
}

// state returns the state of id now.
func (b testBundle) state(t *testing.T, id uuid.UUID) relay.State {
	t.Helper()
	st, err := b.client.Status(t.Context(), id)
	require.NoError(t, err)
	return st.State
}

// dead stages an SMS to invalidNumber, which the provider rejects, and
// returns its id once it is dead.
func (b testBundle) dead(t *testing.T, ctx context.Context) uuid.UUID {
	t.Helper()
	b.delivery.ScriptRecipient(invalidNumber,
		delivery.Reject(delivery.WithCode(delivery.CodeInvalidRecipient, errTwilio)))
	id := b.stage(t, ctx, notification.Request{Channel: "sms", Recipient: invalidNumber, Template: "booking_confirmed"})[0]
	require.Equal(t, relay.StateDead, b.settled(t, id).State)
	return id
}

// errTwilio is what the provider double says of invalidNumber.
var errTwilio = errorString("21211: the 'To' number is not a valid phone number")

type errorString string

func (e errorString) Error() string { return string(e) }

// site is a console served for a test, and a browser-like client of it
// that keeps cookies and does not follow redirects.
type site struct {
	base   string // the server's address and the console's base path
	client *http.Client
}

// serve serves the console of b with opts, mounted at opts.BasePath, until
// the test ends.
func (b testBundle) serve(t *testing.T, opts *console.Options) *site {
	t.Helper()
	h, err := console.New(b.client, opts)
	require.NoError(t, err)
	base := ""
	if opts != nil {
		base = opts.BasePath
	}
	mux := http.NewServeMux()
	mux.Handle(base+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	return &site{base: srv.URL + base, client: client}
}

// do sends req and returns the response, its body read.
func (s *site) do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// get fetches the page at path (below the base path), and fails the test
// unless it answers want.
func (s *site) get(t *testing.T, path string, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+path, nil)
	require.NoError(t, err)
	resp, body := s.do(t, req)
	require.Equal(t, want, resp.StatusCode, "GET %s: %s", path, body)
	return body
}

// post posts form to path (below the base path) with headers, as a
// browser on the page would (Sec-Fetch-Site: same-origin) unless headers
// say otherwise.
func (s *site) post(t *testing.T, path string, form url.Values, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, _ := s.do(t, req)
	return resp
}

var tokenField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token returns the anti-forgery token of the form on the page at path.
func (s *site) token(t *testing.T, path string) string {
	t.Helper()
	m := tokenField.FindStringSubmatch(s.get(t, path, http.StatusOK))
	require.NotNil(t, m, "a form on %s", path)
	return m[1]
}

var link = regexp.MustCompile(`href="([^"]+)"`)

// crawl fetches every page reachable from the overview by the console's
// links, and returns them by path.
func (s *site) crawl(t *testing.T) map[string]string {
	t.Helper()
	u, err := url.Parse(s.base)
	require.NoError(t, err)
	prefix := u.Path
	pages := map[string]string{}
	queue := []string{"/"}
	for len(queue) > 0 && len(pages) < 200 {
		path := queue[0]
		queue = queue[1:]
		if _, seen := pages[path]; seen {
			continue
		}
		pages[path] = s.get(t, path, http.StatusOK)
		for _, m := range link.FindAllStringSubmatch(pages[path], -1) {
			href := strings.ReplaceAll(m[1], "&amp;", "&")
			if rest, ok := strings.CutPrefix(href, prefix+"/"); ok {
				queue = append(queue, "/"+rest)
			}
		}
	}
	return pages
}
