package push_test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/push"
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
	srv  *httptest.Server
	stop chan struct{} // closed when the test ends: releases a stall

	// accessToken is the token the fake requires; empty means none.
	accessToken string

	mu       sync.Mutex
	requests []expoRequest
	tickets  int
	stalled  bool
	fail     *cannedAnswer
	ticket   string // a ticket error code to answer with, "" for ok
}

// cannedAnswer is an answer the fake gives to every request.
type cannedAnswer struct {
	status int
	body   string
	header http.Header
}

// startExpo starts a fake Expo that requires accessToken (when not empty),
// closed when the test ends.
func startExpo(t *testing.T, accessToken string) *fakeExpo {
	t.Helper()
	f := &fakeExpo{stop: make(chan struct{}), accessToken: accessToken}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.stop) }) // runs first: a stalled handler returns
	return f
}

// received returns a copy of the requests so far.
func (f *fakeExpo) received() []expoRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]expoRequest(nil), f.requests...)
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
	for _, r := range f.received() {
		keys = append(keys, r.IdempotencyKey)
	}
	return keys
}

// failWith makes the fake answer every request with status, body and the
// header pairs in kv.
func (f *fakeExpo) failWith(status int, body string, kv ...string) {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = &cannedAnswer{status: status, body: body, header: h}
}

// ticketError makes the fake answer every valid message with an error
// ticket with code.
func (f *fakeExpo) ticketError(code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ticket = code
}

// stall makes the fake hold every request until the test ends or the
// client goes away.
func (f *fakeExpo) stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = true
}

func (f *fakeExpo) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req := expoRequest{
		Method:         r.Method,
		Path:           r.URL.Path,
		ContentType:    r.Header.Get("Content-Type"),
		Accept:         r.Header.Get("Accept"),
		Authorization:  r.Header.Get("Authorization"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
	}
	decodeErr := json.Unmarshal(raw, &req.Messages)
	f.mu.Lock()
	f.requests = append(f.requests, req)
	stalled, fail, ticketCode := f.stalled, f.fail, f.ticket
	f.mu.Unlock()

	if stalled {
		select {
		case <-f.stop:
		case <-r.Context().Done():
			panic(http.ErrAbortHandler) // no implicit 200 for a client that gave up
		}
		return
	}
	if fail != nil {
		for k, v := range fail.header {
			w.Header()[k] = v
		}
		w.WriteHeader(fail.status)
		_, _ = w.Write([]byte(fail.body))
		return
	}

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
	case decodeErr != nil || len(req.Messages) == 0:
		expoErrors(w, http.StatusBadRequest, "VALIDATION_ERROR", `"value" must be an array of messages: `+string(raw))
		return
	}

	var tickets []map[string]any
	for _, m := range req.Messages {
		switch {
		case m.To == unregisteredToken || !strings.HasSuffix(m.To, "]"):
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
		BaseURL:     expo.srv.URL,
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
