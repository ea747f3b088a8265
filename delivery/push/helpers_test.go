package push_test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/push"
	"github.com/tidings-go/tidings/internal/fakeapi"
)

const (
	testAccessToken = "expo-access-token-s3cret"
	testRecipient   = "ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]"
	// unregisteredToken is a token the fake answers with a
	// DeviceNotRegistered ticket, as Expo does for an uninstalled app.
	unregisteredToken = "ExponentPushToken[uninstalled0000000000]"
	// dataSecret is a value of the template data: it must reach the push
	// and never a reason.
	dataSecret = "Ada-data-secret"
)

// testTemplates are the templates every test Delivery has.
func testTemplates() map[string]push.Template {
	return map[string]push.Template{
		"comment":  {Title: "New comment from {{.author}}", Body: "{{.author}} wrote: {{.text}}"},
		"no-title": {Body: "Ping {{.author}}"},
		"nested":   {Title: "Hi", Body: "Hello {{.user.name}}"},
	}
}

// commentData is data the "comment" template can render.
func commentData() map[string]any {
	return map[string]any{"author": dataSecret, "text": "nice post"}
}

// expoRequest is what the fake received in one request.
type expoRequest struct {
	Method         string
	Path           string
	ContentType    string
	Accept         string
	Authorization  string
	IdempotencyKey string
	Messages       []expoMessage
	raw            []byte // the body as it came
	decodeErr      error  // why it is not a list of messages
}

// expoMessage is one message as Expo reads it.
type expoMessage struct {
	To    string         `json:"to"`
	Title string         `json:"title"`
	Body  string         `json:"body"`
	Data  map[string]any `json:"data"`
}

// fakeExpo speaks the shape of Expo's push API: it checks the method,
// path, content type, access token and messages as Expo does, answering
// its error bodies and tickets, and records every request. Like Expo, it
// does not deduplicate.
type fakeExpo struct {
	*fakeapi.Server[expoRequest]

	// accessToken is the token the fake requires; empty means none.
	accessToken string

	mu      sync.Mutex
	tickets int
	ticket  string // a ticket error code to answer with, "" for ok
}

// startExpo starts a fake Expo that requires accessToken (when not empty),
// closed when the test ends.
func startExpo(t *testing.T, accessToken string) *fakeExpo {
	t.Helper()
	f := &fakeExpo{accessToken: accessToken}
	f.Server = fakeapi.Start(t, readExpo, f.answer)
	return f
}

// readExpo reads a request as the fake records it.
func readExpo(r *http.Request) expoRequest {
	raw, _ := io.ReadAll(r.Body)
	req := expoRequest{
		Method:         r.Method,
		Path:           r.URL.Path,
		ContentType:    r.Header.Get("Content-Type"),
		Accept:         r.Header.Get("Accept"),
		Authorization:  r.Header.Get("Authorization"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		raw:            raw,
	}
	req.decodeErr = json.Unmarshal(raw, &req.Messages)
	return req
}

// pushes returns how many tickets the fake issued: pushes it would send.
func (f *fakeExpo) pushes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tickets
}

// keys returns the Idempotency-Key of every request so far.
func (f *fakeExpo) keys() []string {
	var keys []string
	for _, r := range f.Requests() {
		keys = append(keys, r.IdempotencyKey)
	}
	return keys
}

// ticketError makes the fake answer every valid message with an error
// ticket with code.
func (f *fakeExpo) ticketError(code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ticket = code
}

func (f *fakeExpo) answer(w http.ResponseWriter, r *http.Request, req expoRequest) {
	f.mu.Lock()
	ticketCode := f.ticket
	f.mu.Unlock()
	switch {
	case r.URL.Path != "/--/api/v2/push/send":
		expoErrors(w, http.StatusNotFound, "NOT_FOUND", "Not found: "+r.URL.Path)
		return
	case r.Method != http.MethodPost:
		expoErrors(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "Use POST")
		return
	case f.accessToken != "" && req.Authorization != "Bearer "+f.accessToken:
		expoErrors(w, http.StatusUnauthorized, "UNAUTHORIZED", "The bearer token "+req.Authorization+" is invalid")
		return
	case !strings.HasPrefix(req.ContentType, "application/json"):
		expoErrors(w, http.StatusBadRequest, "VALIDATION_ERROR", "Content-Type must be application/json")
		return
	case req.decodeErr != nil || len(req.Messages) == 0:
		expoErrors(w, http.StatusBadRequest, "VALIDATION_ERROR", `"value" must be an array of messages: `+string(req.raw))
		return
	}

	var tickets []map[string]any
	for _, m := range req.Messages {
		switch {
		case m.To == unregisteredToken || !strings.HasSuffix(m.To, "]") && (len(m.To) != 36 || uuid.Validate(m.To) != nil):
			tickets = append(tickets, ticketErrorBody(m.To, "DeviceNotRegistered",
				fmt.Sprintf("%q is not a registered push notification recipient", m.To)))
		case ticketCode != "":
			tickets = append(tickets, ticketErrorBody(m.To, ticketCode, "Could not send to "+m.To+": "+m.Body))
		default:
			tickets = append(tickets, map[string]any{"status": "ok", "id": uuid.NewString()})
			f.mu.Lock()
			f.tickets++
			f.mu.Unlock()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": tickets})
}

// ticketErrorBody is Expo's error ticket for a message to token.
func ticketErrorBody(token, code, message string) map[string]any {
	return map[string]any{
		"status":  "error",
		"message": message,
		"details": map[string]any{"error": code, "expoPushToken": token},
	}
}

// expoErrors answers as Expo does when it refuses a whole request.
func expoErrors(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprint(w, expoErrorsBody(code, message))
}

// expoErrorsBody is Expo's body for a refused request.
func expoErrorsBody(code, message string) string {
	b, _ := json.Marshal(map[string]any{
		"errors": []map[string]any{{"code": code, "message": message}},
	})
	return string(b)
}

// ticketBody is Expo's answer with the one ticket t.
func ticketBody(t map[string]any) string {
	b, _ := json.Marshal(map[string]any{"data": []map[string]any{t}})
	return string(b)
}

// testBundle is what a test works with: a fake Expo and a Delivery for
// it.
type testBundle struct {
	expo   *fakeExpo
	cfg    *push.Config
	pusher *push.Delivery
}

// setup starts a fake Expo that requires testAccessToken and a Delivery
// for it, with the test templates, after configure changed the Config.
func setup(t *testing.T, configure ...func(*push.Config)) *testBundle {
	t.Helper()
	expo := startExpo(t, testAccessToken)
	cfg := &push.Config{
		BaseURL:     expo.URL,
		AccessToken: testAccessToken,
		Templates:   testTemplates(),
	}
	for _, f := range configure {
		f(cfg)
	}
	pusher, err := push.New(cfg)
	require.NoError(t, err)
	return &testBundle{expo: expo, cfg: cfg, pusher: pusher}
}

// newPending returns a request for template with data, to testRecipient,
// with a fresh id.
func newPending(template string, data map[string]any) delivery.Pending {
	p := delivery.Pending{
		Channel:   "push",
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
	require.NotContains(t, text, "PushToken")
	require.NotContains(t, text, testAccessToken)
	for _, v := range p.Data {
		require.NotContains(t, text, fmt.Sprint(v))
	}
	for _, s := range secrets {
		require.NotContains(t, text, s)
	}
}
