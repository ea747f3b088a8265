package console_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"html"
	"log/slog"
	"net/http"
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
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/console"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
)

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	client, err := notification.NewClient(nil, nil)
	require.NoError(t, err)
	_, err = console.New(nil, nil)
	require.ErrorIs(t, err, console.ErrOptions)
	require.ErrorContains(t, err, "client is nil")
	for field, opts := range map[string]console.Options{
		"BasePath":          {BasePath: "ops"},
		"BasePath ":         {BasePath: "/ops/"},
		"BasePath  ":        {BasePath: "/ops tidings"},
		"Secret":            {Secret: []byte("short")},
		"TrustedOrigins[1]": {TrustedOrigins: []string{"https://ops.example.com", "://"}},
	} {
		_, err := console.New(client, &opts)
		require.ErrorIs(t, err, console.ErrOptions, field)
		require.ErrorContains(t, err, strings.TrimSpace(field))
	}
	_, err = console.New(client, &console.Options{BasePath: "/ops/tidings", Secret: bytes.Repeat([]byte{1}, console.SecretMinLen)})
	require.NoError(t, err)
}

func TestPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	ctx := relay.WithCorrelationID(t.Context(), "booking-42")
	dead := b.dead(t, ctx)
	delivered := b.stage(t, ctx, notification.Request{Channel: "mail", Recipient: "ada@drivers.example", Template: "booking_confirmed"})[0]
	require.Equal(t, relay.StateProcessed, b.settled(t, delivered).State)
	later := b.stage(t, ctx, notification.Request{Channel: "push", Recipient: "ExponentPushToken[ada-device]",
		Template: "reminder", NotBefore: time.Now().Add(time.Hour)})[0]
	s := b.serve(t, &console.Options{BasePath: "/ops/tidings"})

	overview := s.get(t, "/", http.StatusOK)
	require.Contains(t, overview, "<td>bookings</td><td>sms</td>")
	require.Contains(t, overview, `href="/ops/tidings/dead/list?module=bookings&amp;channel=sms">1</a>`)

	groups := s.get(t, "/dead", http.StatusOK)
	require.Contains(t, groups, `href="/ops/tidings/dead/list?code=recipient.invalid"><code>recipient.invalid</code></a> <span class="count">1</span>`)

	list := s.get(t, "/dead/list?code=recipient.invalid", http.StatusOK)
	require.Contains(t, list, `value="`+dead.String()+`"`, "the dead request, to select")
	require.Contains(t, list, "21211: the &#39;To&#39; number is not a valid phone number")
	require.Contains(t, list, "Re-emit all 1 of this group")

	page := s.get(t, "/requests/"+dead.String(), http.StatusOK)
	require.Contains(t, page, `state-dead">dead</span>`)
	require.Contains(t, page, `action="/ops/tidings/requests/`+dead.String()+`/reemit"`)
	require.Contains(t, page, `href="/ops/tidings/search?correlation=booking-42"`)
	page = s.get(t, "/requests/"+delivered.String(), http.StatusOK)
	require.Contains(t, page, `state-processed">processed</span>`)
	require.NotContains(t, page, `method="post"`, "nothing to change on a delivered request")

	found := s.get(t, "/search?q=booking-42", http.StatusOK)
	for _, id := range []uuid.UUID{dead, delivered, later} {
		require.Contains(t, found, `href="/ops/tidings/requests/`+id.String()+`"`)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+"/search?q="+dead.String(), nil)
	require.NoError(t, err)
	resp, _ := s.do(t, req)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a request's id opens its page")
	require.Equal(t, "/ops/tidings/requests/"+dead.String(), resp.Header.Get("Location"))
	require.Contains(t, s.get(t, "/search?q=booking-43", http.StatusOK), "none was staged under this correlation id")

	s.get(t, "/requests/"+uuid.NewString(), http.StatusNotFound)
	s.get(t, "/requests/nope", http.StatusBadRequest)
	s.get(t, "/dead/list?after=nope", http.StatusBadRequest)
	s.get(t, "/nope", http.StatusNotFound)
	require.Contains(t, s.get(t, "/assets/console.css", http.StatusOK), "font")

	// Cancel the scheduled one from its page.
	path := "/requests/" + later.String()
	resp = s.post(t, path+"/cancel", url.Values{"csrf": {s.token(t, path)}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, s.get(t, path+"?cancelled=yes", http.StatusOK), "Cancelled.")
	require.Equal(t, relay.StateCancelled, b.state(t, later))
}

func TestPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	b.delivery.ScriptChannel("push", func() []delivery.Outcome {
		out := make([]delivery.Outcome, 60)
		for i := range out {
			out[i] = delivery.Reject(errors.New("DeviceNotRegistered"))
		}
		return out
	}()...)
	reqs := make([]notification.Request, 60)
	for i := range reqs {
		reqs[i] = notification.Request{Channel: "push", Recipient: "ExponentPushToken[device]", Template: "reminder"}
	}
	ids := b.stage(t, t.Context(), reqs...)
	for _, id := range ids {
		b.settled(t, id)
	}
	s := b.serve(t, nil)
	first := s.get(t, "/dead/list?code=provider.rejected", http.StatusOK)
	m := link.FindAllStringSubmatch(first, -1)
	next := strings.ReplaceAll(m[len(m)-1][1], "&amp;", "&")
	require.Contains(t, next, "after=", "the last link goes to the next page")
	second := s.get(t, next, http.StatusOK)
	rows := func(page string) int { return strings.Count(page, `name="id"`) }
	require.Equal(t, 50, rows(first))
	require.Equal(t, 10, rows(second))
	require.NotContains(t, second, "after=", "no page after the last")
}

// TestReemitGroupAsShown re-emits a whole group: the requests it held
// when its page was shown, not one that died since.
func TestReemitGroupAsShown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	first := b.dead(t, t.Context())
	list := "/dead/list?code=recipient.invalid"
	s := b.serve(t, nil)
	page := s.get(t, list, http.StatusOK)
	require.Contains(t, page, "Re-emit all 1 of this group")
	until := regexp.MustCompile(`name="until" value="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, until)
	later := b.dead(t, t.Context())

	resp := s.post(t, "/dead/reemit", url.Values{"csrf": {s.token(t, list)}, "scope": {"group"},
		"code": {"recipient.invalid"}, "until": {until[1]}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/dead/list?code=recipient.invalid&reemitted=1", resp.Header.Get("Location"))
	require.Equal(t, relay.StateProcessed, b.settled(t, first).State)
	require.Equal(t, relay.StateDead, b.state(t, later), "died after the page was shown")

	resp = s.post(t, "/dead/reemit", url.Values{"csrf": {s.token(t, list)}, "scope": {"selected"},
		"code": {"recipient.invalid"}}, nil)
	require.Equal(t, "/dead/list?code=recipient.invalid&reemitted=0", resp.Header.Get("Location"), "nothing ticked")
	require.Contains(t, s.get(t, list+"&reemitted=0", http.StatusOK), "Nothing was re-emitted")
}

// TestForgery posts re-emits that a forged or stale form would send, and
// checks each is refused and changes nothing; then the genuine one.
func TestForgery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	id := b.dead(t, t.Context())
	list := "/dead/list?code=recipient.invalid"
	s := b.serve(t, nil)
	token := s.token(t, list)
	form := func(token string) url.Values {
		return url.Values{"csrf": {token}, "scope": {"selected"}, "id": {id.String()}, "code": {"recipient.invalid"}}
	}
	other := b.serve(t, nil) // another process: a key of its own
	othersToken := other.token(t, list)
	stranger := b.serve(t, nil)
	stranger.client.Jar = nil // a client without the cookie

	for name, tc := range map[string]struct {
		site    *site
		form    url.Values
		headers map[string]string
	}{
		"NoToken":                  {s, form(""), nil},
		"WrongToken":               {s, form(strings.Repeat("A", len(token))), nil},
		"AnotherProcesssToken":     {s, form(othersToken), nil},
		"NoCookie":                 {stranger, form(token), nil},
		"CrossSite":                {s, form(token), map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"SameSiteIsNotSameOrigin":  {s, form(token), map[string]string{"Sec-Fetch-Site": "same-site"}},
		"OtherOriginOldBrowser":    {s, form(token), map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}},
		"TokenOfAnotherCookieOnly": {other, form(token), nil},
	} {
		resp := tc.site.post(t, "/dead/reemit", tc.form, tc.headers)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
		require.Equal(t, relay.StateDead, b.state(t, id), "%s changed nothing", name)
	}

	// Every other POST is guarded alike: a forged one changes nothing.
	later := notification.Request{Channel: "mail", Recipient: "ada@example.com", Template: "welcome", NotBefore: time.Now().Add(time.Hour)}
	pending := b.stage(t, t.Context(), later)[0]
	require.NoError(t, b.client.Suppress(t.Context(), b.db, notification.Suppression{Channel: "mail", Address: "bea@example.com"}))
	guarded := map[string]url.Values{
		"/requests/" + id.String() + "/reemit":      {},
		"/requests/" + pending.String() + "/cancel": {},
		"/suppressions/lift":                        {"channel": {"mail"}, "address": {"bea@example.com"}, "scope": {""}},
	}
	for path, fields := range guarded {
		for name, forged := range map[string]struct {
			csrf    string
			headers map[string]string
		}{"NoToken": {"", nil}, "CrossSite": {token, map[string]string{"Sec-Fetch-Site": "cross-site"}}} {
			f := url.Values{"csrf": {forged.csrf}}
			for k, v := range fields {
				f[k] = v
			}
			resp := s.post(t, path, f, forged.headers)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", path, name)
		}
	}
	require.Equal(t, relay.StateDead, b.state(t, id), "a forged re-emit changed nothing")
	require.Equal(t, relay.StatePending, b.state(t, pending), "a forged cancel changed nothing")
	kept, err := b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: "mail", Address: "bea@example.com"})
	require.NoError(t, err)
	require.Len(t, kept, 1, "a forged lift changed nothing")

	resp := s.post(t, "/dead/reemit", form(token), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/dead/list?code=recipient.invalid&reemitted=1", resp.Header.Get("Location"))
	require.Equal(t, relay.StateProcessed, b.settled(t, id).State, "re-emitted, and delivered: its script ran out")
}

// TestTrustedOrigin accepts a POST from an origin the options trust, such
// as the public address of a proxy that rewrites the Host header.
func TestTrustedOrigin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	id := b.dead(t, t.Context())
	s := b.serve(t, &console.Options{TrustedOrigins: []string{"https://ops.example.com"}})
	path := "/requests/" + id.String()
	token := s.token(t, path)
	resp := s.post(t, path+"/reemit", url.Values{"csrf": {token}},
		map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://ops.example.com"})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, relay.StateProcessed, b.settled(t, id).State)
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	id := b.dead(t, t.Context())
	pending := b.stage(t, t.Context(), notification.Request{Channel: "mail", Recipient: "ada@drivers.example",
		Template: "reminder", NotBefore: time.Now().Add(time.Hour)})[0]
	writable := b.serve(t, nil)
	token := writable.token(t, "/requests/"+id.String())
	s := b.serve(t, &console.Options{ReadOnly: true, Secret: nil})

	pages := s.crawl(t)
	require.Contains(t, pages, "/requests/"+id.String())
	require.Contains(t, pages, "/dead/list?code=recipient.invalid")
	s.get(t, "/requests/"+pending.String(), http.StatusOK)
	for path, body := range pages {
		require.NotContains(t, body, `method="post"`, path)
		require.NotContains(t, body, `name="csrf"`, path)
	}
	for _, path := range []string{"/dead/reemit", "/requests/" + id.String() + "/reemit", "/requests/" + pending.String() + "/cancel"} {
		resp := s.post(t, path, url.Values{"csrf": {token}, "scope": {"group"}, "until": {time.Now().Format(time.RFC3339Nano)}}, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
	}
	require.Empty(t, s.client.Jar.Cookies(mustURL(t, s.base)), "no anti-forgery cookie: there is nothing to post")
	require.Equal(t, relay.StateDead, b.state(t, id), "not re-emitted")
	require.Equal(t, relay.StatePending, b.state(t, pending), "not cancelled")
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// TestRecipientsAreMasked crawls every page and finds no recipient in any,
// unless the options ask to show them.
func TestRecipientsAreMasked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	recipients := map[string]string{ // recipient: as masked
		"zelda.quintessa@example.com":      "z***@example.com",
		"+14155550100":                     "+1415*****00",
		"ExponentPushToken[zelda-phone-9]": "Exp***9]",
	}
	var ids []uuid.UUID
	for r := range recipients {
		b.delivery.ScriptRecipient(r, delivery.Reject(errors.New("refused")))
		channel := map[bool]string{true: "mail", false: "push"}[strings.Contains(r, "@")]
		if strings.HasPrefix(r, "+") {
			channel = "sms"
		}
		ids = append(ids, b.stage(t, relay.WithCorrelationID(t.Context(), "zelda"),
			notification.Request{Channel: channel, Recipient: r, Template: "welcome"})...)
	}
	for _, id := range ids {
		require.Equal(t, relay.StateDead, b.settled(t, id).State)
	}
	secrets := []string{"zelda.quintessa", "5550100", "4155550", "zelda-phone"}

	pages := b.serve(t, nil).crawl(t)
	require.Contains(t, pages, "/dead/list?code=provider.rejected")
	for path, body := range pages {
		for _, secret := range secrets {
			require.NotContains(t, body, secret, path)
		}
	}
	list := html.UnescapeString(pages["/dead/list?code=provider.rejected"])
	for _, masked := range recipients {
		require.Contains(t, list, masked)
	}

	list = html.UnescapeString(b.serve(t, &console.Options{ShowRecipients: true}).get(t, "/dead/list?code=provider.rejected", http.StatusOK))
	for r := range recipients {
		require.Contains(t, list, r, "shown as they are when the options say so")
	}
}

// TestHostileValuesAreEscaped stages values a page shows that carry HTML
// and checks every page shows them as text.
func TestHostileValuesAreEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	const (
		correlation = `"><script>alert("correlation")</script>`
		recipient   = `x@"><img src=x onerror=alert("recipient")>`
		template    = `</td><script>alert("template")</script>`
		reason      = `<script>alert("reason")</script>`
	)
	b.delivery.ScriptRecipient(recipient, delivery.Reject(errorString(reason)))
	id := b.stage(t, relay.WithCorrelationID(t.Context(), correlation),
		notification.Request{Channel: "mail", Recipient: recipient, Template: template})[0]
	require.Equal(t, relay.StateDead, b.settled(t, id).State)

	for _, opts := range []*console.Options{nil, {ShowRecipients: true}} {
		s := b.serve(t, opts)
		pages := s.crawl(t)
		pages["/search"] = s.get(t, "/search?q="+url.QueryEscape(correlation), http.StatusOK)
		require.Contains(t, pages["/search"], `href="/requests/`+id.String()+`"`)
		require.Contains(t, pages, "/requests/"+id.String())
		for path, body := range pages {
			for _, raw := range []string{"<script>alert", "<img src=x", "</td><script>"} {
				require.NotContains(t, body, raw, path)
			}
		}
		require.Contains(t, pages["/requests/"+id.String()], "&lt;script&gt;alert(&#34;reason&#34;)&lt;/script&gt;")
		require.Contains(t, pages["/dead/list?code=provider.rejected"], "&lt;/td&gt;&lt;script&gt;alert(&#34;template&#34;)")
	}
}

// TestInFlight shows a request a delivery holds: handed, so not "not
// tried yet", and counted as scheduled, as the overview says.
func TestInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.delivery.ScriptRecipient("ada@example.com", recording.Hang())
	// The delivery hangs until the test ends, not until a timeout a
	// loaded machine could reach before the page is read.
	b.run(t, func(cfg *relay.Config) { cfg.HandTimeout, cfg.Lease = time.Hour, 2*time.Hour })
	id := b.stage(t, t.Context(), notification.Request{Channel: "mail", Recipient: "ada@example.com", Template: "welcome"})[0]
	ctx, cancel := context.WithTimeout(t.Context(), testwait.Within)
	defer cancel()
	_, err := b.delivery.Wait(ctx, 1)
	require.NoError(t, err, "waited for the delivery to be called")

	s := b.serve(t, nil)
	page := s.get(t, "/requests/"+id.String(), http.StatusOK)
	require.Contains(t, page, "<dt>Hands</dt><dd>1")
	require.NotContains(t, page, "not tried yet", "a delivery holds it")
	st, err := b.client.Stats(t.Context(), module)
	require.NoError(t, err)
	require.Len(t, st.Lanes, 1)
	require.Equal(t, []int64{0, 1}, []int64{st.Lanes[0].Due, st.Lanes[0].Scheduled})
	require.Contains(t, s.get(t, "/", http.StatusOK), "Scheduled those that come due later, those waiting for a retry, and those in flight")
}

// TestOddParametersAreBadRequests sends parameters PostgreSQL cannot take
// (a NUL, invalid UTF-8) and times it would refuse as they are (an offset
// beyond ±15:59): the first are a 400 that names the parameter, the others
// are read in UTC; none is a database failure.
func TestOddParametersAreBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	b.dead(t, t.Context()) // so that the list has its forms
	var logs logbuf.Buffer
	s := b.serve(t, &console.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, tc := range []struct{ path, param string }{
		{"/search?q=a%00b", "q"},
		{"/search?q=booking&correlation=%FF", "correlation"},
		{"/dead/list?code=provider.%00rejected", "code"},
		{"/dead/list?module=%C3", "module"},
		{"/dead/list?channel=mail%00", "channel"},
		{"/suppressions?channel=%00", "channel"},
	} {
		page := s.get(t, tc.path, http.StatusBadRequest)
		require.Contains(t, page, "The parameter &#34;"+tc.param+"&#34; is not text", tc.path)
	}
	far := "2026-01-02T03:04:05-23:59"
	s.get(t, "/dead/list?after="+url.QueryEscape(far+"_"+uuid.NewString()), http.StatusOK)

	list := "/dead/list?code=recipient.invalid"
	resp := s.post(t, "/dead/reemit", url.Values{"csrf": {s.token(t, list)}, "scope": {"group"},
		"code": {"recipient.invalid\x00"}, "until": {far}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a form's field too")
	resp = s.post(t, "/dead/reemit", url.Values{"csrf": {s.token(t, list)}, "scope": {"group"},
		"code": {"recipient.invalid"}, "until": {far}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.NotContains(t, logs.String(), "database failed")
}

// TestDatabaseErrorsAreLoggedNotShown reads a schema the role cannot
// see: the page says where to look, and only the log says what failed.
func TestDatabaseErrorsAreLoggedNotShown(t *testing.T) {
	t.Parallel()
	client, err := notification.NewClient(pgtest.DB(t), &notification.ClientConfig{Schema: "t_console_missing"})
	require.NoError(t, err)
	var logs logbuf.Buffer
	h, err := console.New(client, &console.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	for _, path := range []string{"/", "/dead", "/dead/list", "/requests/" + uuid.NewString(), "/search?q=booking-1"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		require.Equal(t, http.StatusInternalServerError, rec.Code, path)
		require.Contains(t, rec.Body.String(), "the service&#39;s log says why", path)
		require.NotContains(t, rec.Body.String(), "t_console_missing", path)
		require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		require.Contains(t, rec.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'")
	}
	require.Contains(t, logs.String(), "component=console")
	require.Contains(t, logs.String(), "t_console_missing", "the log says what failed")
}

func TestServeLocal(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, tidings.Migrate)
	ctx, cancel := context.WithCancel(t.Context())
	listening := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- console.ServeLocal(ctx, pgtest.DB(t), &console.LocalConfig{
			Client:        notification.ClientConfig{Schema: schema},
			Console:       console.Options{BasePath: "/tidings", ReadOnly: true},
			ListeningFunc: func(url string) { listening <- url },
		})
	}()
	addr := testwait.Recv(t, listening, "the console to listen")
	require.True(t, strings.HasPrefix(addr, "http://127.0.0.1:"), addr)
	require.True(t, strings.HasSuffix(addr, "/tidings/"), addr)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, addr, nil)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// Asked under another name that resolves to the loopback address (a
	// page elsewhere that rebinds its name), it answers nothing of its own.
	req.Host = "attacker.example:" + req.URL.Port()
	resp, err = client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	req.Host = "localhost:" + req.URL.Port()
	resp, err = client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cancel()
	require.NoError(t, testwait.Recv(t, done, "ServeLocal to return once its context ended"))

	err = console.ServeLocal(t.Context(), pgtest.DB(t), &console.LocalConfig{Port: 70000})
	require.ErrorContains(t, err, "Port 70000")
	err = console.ServeLocal(t.Context(), nil, nil)
	require.ErrorIs(t, err, console.ErrOptions)
	require.ErrorContains(t, err, "db")
	nobody, err := sql.Open("postgres", "postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(func() { _ = nobody.Close() })
	err = console.ServeLocal(t.Context(), nobody, nil)
	require.ErrorContains(t, err, "connect to the database")
}
