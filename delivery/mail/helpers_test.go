package mail_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	netmail "net/mail"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/mail"
)

const (
	testFrom      = "Tidings <no-reply@tidings.example>"
	testRecipient = "Ada Lovelace <ada@example.org>"
	testAddress   = "ada@example.org"
	testUsername  = "smtp-user"
	testPassword  = "s3cret-password"
)

// testTemplates are the templates every test Delivery has.
func testTemplates() map[string]mail.Template {
	return map[string]mail.Template{
		"welcome": {
			Subject: "Welcome, {{.name}}",
			Text:    "Hello {{.name}},\nyour code is {{.code}}.\n",
			HTML:    "<p>Hello {{.name}}, your code is <b>{{.code}}</b>.</p>",
		},
		"text-only": {Subject: "Your code", Text: "Your code is {{.code}}.\n"},
		"html-only": {Subject: "Your code", HTML: "<p>Your code is {{.code}}.</p>"},
		"nested":    {Subject: "Hello", Text: "Hello {{.user.name}}"},
		"index":     {Subject: "Hello", Text: "First: {{index .items 5}}"},
		"verbatim":  {Subject: "{{.subject}}", Text: "{{.body}}"},
	}
}

// welcomeData is data the "welcome" template can render.
func welcomeData() map[string]any {
	return map[string]any{"name": "Ada", "code": "123456"}
}

// testBundle is what a test works with: a server and a Delivery for it.
type testBundle struct {
	srv    *testServer
	cfg    *mail.Config
	mailer *mail.Delivery
}

// setup starts a server with opts and a Delivery for it, with the test
// templates, after configure changed the Config.
func setup(t testing.TB, opts serverOptions, configure ...func(*mail.Config)) *testBundle {
	t.Helper()
	srv := startServer(t, opts)
	cfg := &mail.Config{
		Addr:      srv.addr,
		From:      testFrom,
		Templates: testTemplates(),
	}
	for _, f := range configure {
		f(cfg)
	}
	mailer, err := mail.New(cfg)
	require.NoError(t, err)
	// Before the server stops, which waits for every connection to end.
	t.Cleanup(func() { require.NoError(t, mailer.Close()) })
	return &testBundle{srv: srv, cfg: cfg, mailer: mailer}
}

// newPending returns a request for template with data, to testRecipient,
// with a fresh id.
func newPending(template string, data map[string]any) delivery.Pending {
	p := delivery.Pending{
		Channel:   "mail",
		Recipient: testRecipient,
		Template:  template,
		Data:      data,
		Attempt:   1,
		StagedAt:  time.Now(),
	}
	_, _ = rand.Read(p.ID[:])
	return p
}

// parsedMessage is a received message, read as a mail reader would.
type parsedMessage struct {
	header netmail.Header
	// parts holds each body, decoded, by media type.
	parts map[string]string
	// multipart is whether the body was multipart/alternative.
	multipart bool
}

// parseMessage reads raw with net/mail and mime/multipart, and checks
// that every line ends in CRLF.
func parseMessage(t *testing.T, raw []byte) parsedMessage {
	t.Helper()
	require.NotContains(t, strings.ReplaceAll(string(raw), "\r\n", ""), "\n", "a bare LF")
	require.NotContains(t, strings.ReplaceAll(string(raw), "\r\n", ""), "\r", "a bare CR")
	for line := range strings.SplitSeq(string(raw), "\r\n") {
		require.LessOrEqual(t, len(line), 998, "a line longer than SMTP allows")
	}

	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	require.NoError(t, err)
	pm := parsedMessage{header: msg.Header, parts: map[string]string{}}

	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	if mediaType == "multipart/alternative" {
		pm.multipart = true
		mr := multipart.NewReader(msg.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			// NextPart decodes quoted-printable and drops the header that
			// said so.
			partType, partParams, err := mime.ParseMediaType(part.Header.Get("Content-Type"))
			require.NoError(t, err)
			require.Equal(t, "utf-8", partParams["charset"])
			body, err := io.ReadAll(part)
			require.NoError(t, err)
			pm.parts[partType] = string(body)
		}
		return pm
	}
	require.Equal(t, "utf-8", params["charset"])
	require.Equal(t, "quoted-printable", msg.Header.Get("Content-Transfer-Encoding"))
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	require.NoError(t, err)
	pm.parts[mediaType] = string(body)
	return pm
}

// requireClean fails when outcome's text holds any of secrets.
func requireClean(t *testing.T, outcome delivery.Outcome, secrets ...string) {
	t.Helper()
	text := outcome.String()
	for _, s := range append(secrets, testAddress, "Ada Lovelace", testPassword) {
		require.NotContains(t, text, s)
	}
}
