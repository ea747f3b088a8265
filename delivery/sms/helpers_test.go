package sms_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/sms"
	"github.com/tidings-go/tidings/internal/fakeapi"
)

const (
	testAccountSID = "AC0123456789abcdef0123456789abcdef"
	testAuthToken  = "twilio-auth-token-s3cret"
	testFrom       = "+15005550006"
	testServiceSID = "MG0123456789abcdef0123456789abcdef"
	testRecipient  = "+14155550100"
	// invalidNumber is Twilio's magic test number that it answers with
	// error 21211; the fake does the same.
	invalidNumber = "+15005550001"
	// queueFullNumber is one the fake answers with error 21611, as Twilio
	// answers any while the sender's queue is full.
	queueFullNumber = "+14155550199"
	// dataSecret is a value of the template data: it must reach the body
	// and never a reason.
	dataSecret = "739104-data-secret"
)

// testTemplates are the templates every test Delivery has.
func testTemplates() map[string]string {
	return map[string]string{
		"otp":    "Your code is {{.code}}.",
		"nested": "Hello {{.user.name}}",
		"note":   "{{.note}}",
	}
}

// otpData is data the "otp" template can render.
func otpData() map[string]any {
	return map[string]any{"code": dataSecret}
}

// twilioRequest is what the fake received in one request.
type twilioRequest struct {
	Method         string
	Path           string
	User, Password string
	ContentType    string
	Accept         string
	IdempotencyKey string
	Form           url.Values
}

// fakeTwilio speaks the shape of Twilio's Messages API: it checks the
// method, path, basic auth and form as Twilio does, answering its error
// bodies, records every request, and creates a message for every call it
// accepts, as Twilio does: it drops no repeat.
type fakeTwilio struct {
	*fakeapi.Server[twilioRequest]

	mu   sync.Mutex
	sent int // messages created
}

// startTwilio starts a fake Twilio, closed when the test ends.
func startTwilio(t *testing.T) *fakeTwilio {
	t.Helper()
	f := &fakeTwilio{}
	f.Server = fakeapi.Start(t, readTwilio, f.answer)
	return f
}

// readTwilio reads a request as the fake records it.
func readTwilio(r *http.Request) twilioRequest {
	_ = r.ParseForm()
	user, password, _ := r.BasicAuth()
	return twilioRequest{
		Method:         r.Method,
		Path:           r.URL.Path,
		User:           user,
		Password:       password,
		ContentType:    r.Header.Get("Content-Type"),
		Accept:         r.Header.Get("Accept"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Form:           r.PostForm,
	}
}

// messages returns how many messages the fake created.
func (f *fakeTwilio) messages() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// keys returns the Idempotency-Key of every request so far.
func (f *fakeTwilio) keys() []string {
	var keys []string
	for _, r := range f.Requests() {
		keys = append(keys, r.IdempotencyKey)
	}
	return keys
}

var messagesPath = regexp.MustCompile(`^/2010-04-01/Accounts/([^/]+)/Messages\.json$`)

func (f *fakeTwilio) answer(w http.ResponseWriter, r *http.Request, req twilioRequest) {
	user, password := req.User, req.Password
	m := messagesPath.FindStringSubmatch(r.URL.Path)
	switch {
	case m == nil:
		twilioError(w, http.StatusNotFound, 20404, "The requested resource "+r.URL.Path+" was not found")
		return
	case r.Method != http.MethodPost:
		twilioError(w, http.StatusMethodNotAllowed, 20004, "Method not allowed")
		return
	case user != m[1] || user != testAccountSID || password != testAuthToken:
		twilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return
	case !strings.HasPrefix(req.ContentType, "application/x-www-form-urlencoded"):
		twilioError(w, http.StatusBadRequest, 20001, "Unsupported content type")
		return
	}
	to, body := req.Form.Get("To"), req.Form.Get("Body")
	switch {
	case to == "":
		twilioError(w, http.StatusBadRequest, 21604, "A 'To' phone number is required.")
		return
	case req.Form.Get("From") == "" && req.Form.Get("MessagingServiceSid") == "":
		twilioError(w, http.StatusBadRequest, 21603, "A 'From' or 'MessagingServiceSid' parameter is required to send a message")
		return
	case body == "":
		twilioError(w, http.StatusBadRequest, 21602, "Message body is required.")
		return
	case to == invalidNumber:
		twilioError(w, http.StatusBadRequest, 21211, "The 'To' number "+to+" is not a valid phone number.")
		return
	case to == queueFullNumber:
		twilioError(w, http.StatusBadRequest, 21611, "This 'From' number has exceeded the maximum number of queued messages")
		return
	}

	sid := newSID("SM")
	f.mu.Lock()
	f.sent++
	f.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"sid":                   sid,
		"account_sid":           m[1],
		"to":                    to,
		"from":                  req.Form.Get("From"),
		"messaging_service_sid": req.Form.Get("MessagingServiceSid"),
		"body":                  body,
		"status":                "queued",
		"num_segments":          "1",
		"direction":             "outbound-api",
		"date_created":          time.Now().UTC().Format(time.RFC1123Z),
		"uri":                   "/2010-04-01/Accounts/" + m[1] + "/Messages/" + sid + ".json",
	})
}

// twilioError answers as Twilio does when it refuses a request.
func twilioError(w http.ResponseWriter, status, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprint(w, twilioErrorBody(status, code, message))
}

// twilioErrorBody is Twilio's error body.
func twilioErrorBody(status, code int, message string) string {
	b, _ := json.Marshal(map[string]any{
		"code":      code,
		"message":   message,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code),
		"status":    status,
	})
	return string(b)
}

// newSID returns a Twilio-style SID with prefix.
func newSID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// testBundle is what a test works with: a fake Twilio and a Delivery for
// it.
type testBundle struct {
	twilio *fakeTwilio
	cfg    *sms.Config
	sender *sms.Delivery
}

// setup starts a fake Twilio and a Delivery for it, with the test
// templates, after configure changed the Config.
func setup(t *testing.T, configure ...func(*sms.Config)) *testBundle {
	t.Helper()
	twilio := startTwilio(t)
	cfg := &sms.Config{
		BaseURL:    twilio.URL,
		AccountSID: testAccountSID,
		AuthToken:  testAuthToken,
		From:       testFrom,
		Templates:  testTemplates(),
	}
	for _, f := range configure {
		f(cfg)
	}
	sender, err := sms.New(cfg)
	require.NoError(t, err)
	return &testBundle{twilio: twilio, cfg: cfg, sender: sender}
}

// newPending returns a request for template with data, to testRecipient,
// with a fresh id.
func newPending(template string, data map[string]any) delivery.Pending {
	p := delivery.Pending{
		Channel:   "sms",
		Recipient: testRecipient,
		Template:  template,
		Data:      data,
		Attempt:   1,
		StagedAt:  time.Now(),
	}
	_, _ = rand.Read(p.ID[:])
	return p
}

// requireClean fails unless reason's text holds none of the request's
// personal data, the credentials or secrets.
func requireClean(t *testing.T, reason error, p delivery.Pending, secrets ...string) {
	t.Helper()
	require.Error(t, reason)
	text := reason.Error()
	require.NotContains(t, text, p.Recipient)
	require.NotContains(t, text, strings.TrimPrefix(p.Recipient, "+"))
	require.NotContains(t, text, testAuthToken)
	for _, v := range p.Data {
		require.NotContains(t, text, fmt.Sprint(v))
	}
	for _, s := range secrets {
		require.NotContains(t, text, s)
	}
}
