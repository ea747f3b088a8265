package deliverytest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/deliverytest"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
	"github.com/tidings-go/tidings/internal/fakeapi"
)

// A module passes the suite with one call: Features, and a setup that wires
// the module to a fresh fake of its provider.
func TestSuite(t *testing.T) {
	t.Parallel()

	t.Run("Webhook", func(t *testing.T) {
		t.Parallel()
		deliverytest.Run(t, deliverytest.Features{Remote: true}, func(t *testing.T) deliverytest.Subject {
			return webhookSubject(t, noFault)
		})
	})

	t.Run("Inbox", func(t *testing.T) {
		t.Parallel()
		deliverytest.Run(t, deliverytest.Features{}, func(*testing.T) deliverytest.Subject {
			in := &inbox{}
			return deliverytest.Subject{Delivery: in, Pending: newPending, Keys: in.keys}
		})
	})
}

// Each check fails for a module with the fault it guards against, and
// passes for the same module without it.
func TestSuiteCatchesFaults(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		fault fault
		check func(tb *recorder, s deliverytest.Subject)
		want  []string // in the failure report
	}{
		{
			name:  "QuotedBody",
			fault: quotesBody,
			check: func(tb *recorder, s deliverytest.Subject) { deliverytest.ProviderErrorsStayOutOfReasons(tb, s, 400) },
			want: []string{
				"the reason quotes the provider's 400 body",
				"the reason names the recipient",
				"the reason holds Subject.Secrets[0]",
				"the reason holds the template data value \"Ada Lovelace\"",
				"the reason holds the template data value \"SKU-4711-X\"",
				"the reason holds the template data value \"Enchantress\"",
				"the reason holds the secret \"deliverytest_code\" of Pending.Secrets",
			},
		},
		{
			name:  "ForgottenKey",
			fault: forgetsKey,
			check: func(tb *recorder, s deliverytest.Subject) { deliverytest.Delivers(tb, s) },
			want:  []string{"does not contain Pending.ID"},
		},
		{
			name:  "KeyPerAttempt",
			fault: keyPerAttempt,
			check: func(tb *recorder, s deliverytest.Subject) {
				deliverytest.SameIDSameKey(tb, deliverytest.Features{Remote: true}, s)
			},
			want: []string{"the same request went out under two idempotency keys"},
		},
		{
			name:  "KeyWithTheAttempt",
			fault: keyWithAttempt,
			check: func(tb *recorder, s deliverytest.Subject) {
				deliverytest.SameIDSameKey(tb, deliverytest.Features{Remote: true}, s)
			},
			want: []string{"the same request went out under two idempotency keys"},
		},
		{
			name:  "NamedRecipient",
			fault: namesRecipient,
			check: func(tb *recorder, s deliverytest.Subject) {
				deliverytest.CancelledContextIsRetry(tb, deliverytest.Features{Remote: true}, s)
			},
			want: []string{"the reason names the recipient"},
		},
		{
			name:  "IgnoredDeadline",
			fault: ignoresDeadline,
			check: func(tb *recorder, s deliverytest.Subject) { deliverytest.TimeoutIsRetry(tb, s, time.Second) },
			want:  []string{"Deliver did not return within 1s of a 200ms deadline"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			t.Run("Faulty", func(t *testing.T) {
				t.Parallel()
				s := webhookSubject(t, tt.fault)
				tb := record(t, func(tb *recorder) { tt.check(tb, s) })
				require.True(t, tb.failed(), "the check passed a module that %s", tt.fault)
				for _, want := range tt.want {
					require.Contains(t, tb.report(), want)
				}
			})

			t.Run("Sound", func(t *testing.T) {
				t.Parallel()
				s := webhookSubject(t, noFault)
				tb := record(t, func(tb *recorder) { tt.check(tb, s) })
				require.False(t, tb.failed(), "the check failed a sound module: %s", tb.report())
			})
		})
	}
}

// webhook is a small HTTP module: it posts the request as JSON to its
// endpoint through httpcall, and reads the provider's error code from a
// 4xx answer. With a fault it is wrong in one way, for
// TestSuiteCatchesFaults.
type webhook struct {
	client   *http.Client
	endpoint string // holds a signing key in its query
	token    string
	fault    fault
}

type message struct {
	To       string         `json:"to"`
	Template string         `json:"template"`
	Data     map[string]any `json:"data"`
}

func (d *webhook) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if d.fault == namesRecipient && ctx.Err() != nil {
		return delivery.Retry(fmt.Errorf("webhook: gave up on %s: %w", p.Recipient, ctx.Err()))
	}
	if d.fault == ignoresDeadline {
		ctx = context.WithoutCancel(ctx)
	}

	payload, err := json.Marshal(message{To: p.Recipient, Template: p.Template, Data: p.Data})
	if err != nil {
		return delivery.Reject(errors.New("webhook: template data is not JSON"))
	}
	// The error would quote the endpoint, and with it the signing key.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.endpoint, bytes.NewReader(payload))
	if err != nil {
		return delivery.Reject(errors.New("webhook: invalid endpoint"))
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Content-Type", "application/json")

	key := p.ID.String()
	switch d.fault {
	case forgetsKey:
		key = ""
	case keyPerAttempt:
		key = uuid.NewString()
	case keyWithAttempt:
		key = p.ID.String() + "-" + strconv.Itoa(p.Attempt)
	}
	resp, out, ok := httpcall.Do(ctx, d.client, req, key)
	if !ok {
		return httpcall.Prefix("webhook", out)
	}
	if resp.StatusCode/100 == 2 {
		var accepted struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(resp.Body, &accepted) // no id, no reference
		return delivery.DeliveredWithReference(httpcall.SafeCode(accepted.ID))
	}
	if d.fault == quotesBody {
		return delivery.Reject(fmt.Errorf("webhook: provider answered %d: %s", resp.StatusCode, resp.Body))
	}
	var failure struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(resp.Body, &failure) // no code, just the status
	return delivery.Reject(fmt.Errorf("webhook: %w", &httpcall.StatusError{StatusCode: resp.StatusCode, Code: failure.Code}))
}

// fault is one way a module gets the contract wrong.
type fault int

const (
	noFault         fault = iota
	quotesBody            // quotes the provider's answer in its reason
	forgetsKey            // sends no idempotency key
	keyPerAttempt         // sends a fresh key on every call
	namesRecipient        // names the recipient when its context ends
	ignoresDeadline       // calls the provider without the delivery's deadline
	keyWithAttempt        // sends its id with the attempt's number as the key
)

func (f fault) String() string {
	return [...]string{"has no fault", "quotes the body", "forgets the key", "sends a key per attempt", "names the recipient", "ignores the deadline",
		"puts the attempt in the key"}[f]
}

// webhookSubject starts a fake provider for t and wires a webhook with
// fault to it.
func webhookSubject(t *testing.T, fault fault) deliverytest.Subject {
	t.Helper()
	fake := startProvider(t)
	signingKey := "sk-" + rand.Text()
	return deliverytest.Subject{
		Delivery: &webhook{
			client:   fake.Client(),
			endpoint: fake.URL + "/v1/messages?signing_key=" + signingKey,
			token:    fake.token,
			fault:    fault,
		},
		Pending: newPending,
		Keys:    fake.keys,
		Stall:   fake.Stall,
		Fail:    fake.fail,
		Secrets: []string{fake.token, signingKey},
	}
}

// provider is a fake of the webhook's provider. It records the
// idempotency key of every request, then answers 200 with a message id
// (401 without the token, 422 for a message without a recipient), or as
// Stall and FailWith say. Safe for concurrent use.
type provider struct {
	*fakeapi.Server[request]
	token string
}

// request is a request as the fake provider records it.
type request struct {
	key, authorization string
	msg                message
	decodeErr          error
}

func startProvider(t *testing.T) *provider {
	t.Helper()
	fake := &provider{token: "tok-" + rand.Text()}
	fake.Server = fakeapi.Start(t, readRequest, fake.answer)
	return fake
}

func readRequest(r *http.Request) request {
	req := request{key: r.Header.Get("Idempotency-Key"), authorization: r.Header.Get("Authorization")}
	req.decodeErr = json.NewDecoder(r.Body).Decode(&req.msg)
	// Read to the end, so the server notices a client that goes away.
	_, _ = io.Copy(io.Discard, r.Body)
	return req
}

func (fake *provider) keys() []string {
	var keys []string
	for _, r := range fake.Requests() {
		keys = append(keys, r.key)
	}
	return keys
}

func (fake *provider) fail(status int, body string) { fake.FailWith(status, body) }

func (fake *provider) answer(w http.ResponseWriter, _ *http.Request, req request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case req.authorization != "Bearer "+fake.token:
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"code":"unauthorized","message":"bad token"}`)
	case req.decodeErr != nil || req.msg.To == "":
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"code":"invalid_message","message":"no recipient"}`)
	default:
		_, _ = io.WriteString(w, `{"id":"msg_`+uuid.NewString()[:8]+`"}`)
	}
}

// inbox is an in-memory module, like an in-app inbox: no provider, so not
// Remote. Its keys are its row ids, which are the request ids.
type inbox struct {
	mu   sync.Mutex
	rows []string
}

func (in *inbox) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if err := ctx.Err(); err != nil {
		return delivery.Retry(fmt.Errorf("inbox: %w", err))
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rows = append(in.rows, p.ID.String())
	return delivery.Delivered()
}

func (in *inbox) keys() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.rows...)
}

// nickname is a named string type, as an application's data may hold.
type nickname string

func newPending() delivery.Pending {
	return delivery.Pending{
		ID:        uuid.Must(uuid.NewV7()),
		Channel:   "webhook",
		Recipient: "ada@example.com",
		Template:  "welcome",
		Data: map[string]any{
			"name":    "Ada Lovelace",
			"code":    "738291",
			"address": map[string]any{"city": "London"},
			"tags":    []any{"analytical-engine"},
			// Shapes JSON does not give back: the suite looks in them too.
			"items":    []map[string]any{{"sku": "SKU-4711-X"}},
			"nickname": nickname("Enchantress"),
		},
		Attempt:  1,
		StagedAt: time.Now(),
	}
}

// recorder is the suite's tb that records failures instead of failing
// the test, so a test can run a check against a faulty module and inspect
// what it reported. Its FailNow ends the goroutine, as testing's does.
type recorder struct {
	ctx context.Context

	mu      sync.Mutex
	errs    []string
	failNow bool
}

func (r *recorder) Helper() {}

func (r *recorder) Context() context.Context { return r.ctx }

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) FailNow() {
	r.mu.Lock()
	r.failNow = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failNow || len(r.errs) > 0
}

func (r *recorder) report() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "\n")
}

// record runs check with a recorder on its own goroutine, as testing runs
// a test, and returns the recorder once check has returned or failed.
func record(t *testing.T, check func(tb *recorder)) *recorder {
	t.Helper()
	tb := &recorder{ctx: t.Context()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(tb)
	}()
	<-done
	return tb
}
