package webhook_test

// The Standard Webhooks scenarios, a receiver that deduplicates on
// webhook-id as the package documentation asks, and a read of Verify's
// source for constant-time comparison.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/webhook"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/pgtest"
)

// The shared test vector of the Standard Webhooks libraries
// (standard-webhooks/standard-webhooks, libraries/*/: TestWebhookSign,
// test_sign_function, "sign function works").
const (
	stdVectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdVectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	stdVectorTimestamp = 1614265330
	stdVectorBody      = `{"test": 2432232314}`
	stdVectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// An unrelated signature the libraries' tests use as a wrong one.
	stdVectorOther = "Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

// stdSign signs as the specification says, independently of the module:
// base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")).
func stdSign(t *testing.T, secret, id string, timestamp int64, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// TestWebhookStandardScenarios runs the scenarios of the Standard Webhooks
// libraries' own test suites (Go webhook_test.go TestWebhook, JavaScript
// webhook.test.ts, Python test_webhooks.py) against Verify, around the
// shared vector: the receiver's clock is the vector's time.
func TestWebhookStandardScenarios(t *testing.T) {
	t.Parallel()
	at := time.Unix(stdVectorTimestamp, 0)
	require.Equal(t, stdVectorSignature, stdSign(t, stdVectorSecret, stdVectorID, stdVectorTimestamp, stdVectorBody), "the independent signer")
	tolerance := int64(webhook.ToleranceDefault / time.Second)

	for _, tc := range []struct {
		name      string
		id        string
		timestamp string
		signature string
		want      error
	}{
		{name: "ValidSignatureIsValid", signature: stdVectorSignature},
		{name: "MissingIDReturnsError", id: "-", signature: stdVectorSignature, want: webhook.ErrMissingHeaders},
		{name: "MissingTimestampReturnsError", timestamp: "-", signature: stdVectorSignature, want: webhook.ErrMissingHeaders},
		{name: "MissingSignatureReturnsError", signature: "-", want: webhook.ErrMissingHeaders},
		{name: "InvalidSignatureIsInvalid", signature: "v1," + stdVectorOther, want: webhook.ErrSignature},
		{name: "InvalidSignatureNotBase64", signature: "v1,dawfeoifkpqwoekfpqoekf", want: webhook.ErrSignature},
		{name: "InvalidSignatureLastCharacter", signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=",
			want: webhook.ErrSignature},
		{name: "PartialSignature", signature: stdVectorSignature[:8], want: webhook.ErrSignature},
		{name: "PartialSignatureVersionOnly", signature: "v1,", want: webhook.ErrSignature},
		{name: "ValidMultiSigIsValid", signature: strings.Join([]string{"v1," + stdVectorOther, "v2," + stdVectorOther, stdVectorSignature,
			"v1," + stdVectorOther}, " ")},
		{name: "InvalidTimestamp", timestamp: "hello", signature: stdVectorSignature, want: webhook.ErrTimestamp},
		{name: "TimestampFrom2000", timestamp: strconv.FormatInt(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 10),
			signature: stdVectorSignature, want: webhook.ErrTimestamp},
		{name: "OldTimestampFails", timestamp: strconv.FormatInt(stdVectorTimestamp-tolerance-1, 10),
			signature: stdSign(t, stdVectorSecret, stdVectorID, stdVectorTimestamp-tolerance-1, stdVectorBody), want: webhook.ErrTimestamp},
		{name: "NewTimestampFails", timestamp: strconv.FormatInt(stdVectorTimestamp+tolerance+1, 10),
			signature: stdSign(t, stdVectorSecret, stdVectorID, stdVectorTimestamp+tolerance+1, stdVectorBody), want: webhook.ErrTimestamp},
		{name: "OldTimestampAtTheEdgePasses", timestamp: strconv.FormatInt(stdVectorTimestamp-tolerance, 10),
			signature: stdSign(t, stdVectorSecret, stdVectorID, stdVectorTimestamp-tolerance, stdVectorBody)},
		{name: "NewTimestampAtTheEdgePasses", timestamp: strconv.FormatInt(stdVectorTimestamp+tolerance, 10),
			signature: stdSign(t, stdVectorSecret, stdVectorID, stdVectorTimestamp+tolerance, stdVectorBody)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for name, v := range map[string]string{
				webhook.HeaderID:        stdOr(tc.id, stdVectorID),
				webhook.HeaderTimestamp: stdOr(tc.timestamp, strconv.Itoa(stdVectorTimestamp)),
				webhook.HeaderSignature: tc.signature,
			} {
				if v != "-" {
					h.Set(name, v)
				}
			}
			err := webhook.Verify([]string{stdVectorSecret}, h, []byte(stdVectorBody), at, 0)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}

	// The libraries also accept the secret without its whsec_ prefix;
	// this module requires the prefix, and says so.
	t.Run("SecretWithoutPrefix", func(t *testing.T) {
		t.Parallel()
		h := http.Header{}
		h.Set(webhook.HeaderID, stdVectorID)
		h.Set(webhook.HeaderTimestamp, strconv.Itoa(stdVectorTimestamp))
		h.Set(webhook.HeaderSignature, stdVectorSignature)
		err := webhook.Verify([]string{strings.TrimPrefix(stdVectorSecret, "whsec_")}, h, []byte(stdVectorBody), at, 0)
		require.ErrorIs(t, err, webhook.ErrInvalidSecret)
	})
}

func stdOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// stdCall is one request as the receiver got it.
type stdCall struct {
	header http.Header
	body   []byte
}

// stdReceiver is the endpoint the webhook package documentation asks
// receivers to write: verify, then deduplicate on webhook-id in the same
// transaction as the work (here the library's own inbox, keyed by the
// request id that webhook-id carries), and answer 2xx to a duplicate.
type stdReceiver struct {
	db      *sql.DB
	ib      *inbox.Inbox
	secrets []string
	skew    time.Duration // the receiver's clock is ahead of the real one by this much
	url     string

	mu      sync.Mutex
	effects map[string]int // work done per webhook-id
	calls   []stdCall
}

// startStdReceiver starts a stdReceiver that deduplicates in ib, closed
// when the test ends.
func startStdReceiver(t *testing.T, ib *inbox.Inbox, secret string, skew time.Duration) *stdReceiver {
	t.Helper()
	r := &stdReceiver{db: pgtest.DB(t), ib: ib, secrets: []string{secret}, skew: skew, effects: map[string]int{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/hooks"
	return r
}

func (r *stdReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.calls = append(r.calls, stdCall{header: req.Header.Clone(), body: body})
	r.mu.Unlock()

	if err := webhook.Verify(r.secrets, req.Header, body, time.Now().Add(r.skew), 0); err != nil {
		http.Error(w, "invalid webhook", http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.HeaderID)
	event, err := uuid.Parse(id)
	if err != nil {
		http.Error(w, "webhook-id is not a request id", http.StatusBadRequest)
		return
	}
	tx, err := r.db.BeginTx(req.Context(), nil)
	if err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = tx.Rollback() }()
	first, err := r.ib.Once(req.Context(), tx, "receiver", event)
	if err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	if first {
		// The work would be done here, in the claim's transaction.
		if err := tx.Commit(); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		r.mu.Lock()
		r.effects[id]++
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusNoContent)
}

// call returns the first call the receiver got with webhook-id id.
func (r *stdReceiver) call(t *testing.T, id string) stdCall {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.header.Get(webhook.HeaderID) == id {
			return c
		}
	}
	t.Fatalf("no call with webhook-id %s", id)
	return stdCall{}
}

func (r *stdReceiver) callsOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.header.Get(webhook.HeaderID) == id {
			n++
		}
	}
	return n
}

func (r *stdReceiver) effectsOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effects[id]
}

// stdReplay sends a captured call to url again, with change applied to a
// copy of its header, and returns the status.
func stdReplay(t *testing.T, url string, c stdCall, change func(http.Header)) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(c.body))
	require.NoError(t, err)
	req.Header = c.header.Clone()
	if change != nil {
		change(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestWebhookReplayedIDs shows why Verify accepting a replay is safe when
// the receiver does what the documentation asks: the webhook-id is signed,
// so deduplicating on it stops redeliveries and replays alike, and a
// replay cannot get a fresh id, a fresh timestamp, another request's
// headers or a late pass.
func TestWebhookReplayedIDs(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, tidings.Migrate)
	ib, err := inbox.New(schema)
	require.NoError(t, err)
	secret := webhook.NewSecret()
	recv := startStdReceiver(t, ib, secret, 0)

	d, err := webhook.New(&webhook.Config{Secrets: []string{secret}})
	require.NoError(t, err)
	pending := func(template string) delivery.Pending {
		return delivery.Pending{ID: uuid.Must(uuid.NewV7()), Channel: "webhook", Recipient: recv.url,
			Template: template, Data: map[string]any{"invoice": "INV-17"}, Attempt: 1, StagedAt: time.Now()}
	}

	// The first delivery, and the same request delivered again (a crash
	// between the endpoint's answer and the dispatcher's commit).
	p := pending("invoice.paid")
	id := p.ID.String()
	require.Equal(t, delivery.KindDelivered, d.Deliver(t.Context(), p).Kind())
	p.Attempt = 2
	require.Equal(t, delivery.KindDelivered, d.Deliver(t.Context(), p).Kind())
	require.Equal(t, 2, recv.callsOf(id), "the same id on every attempt")
	require.Equal(t, 1, recv.effectsOf(id), "the redelivery is answered 2xx and does nothing")
	first := recv.call(t, id)
	t.Cleanup(func() {
		require.Equal(t, 1, recv.effectsOf(id), "one effect, whatever was replayed")
	})

	t.Run("WithinTheToleranceVerifiesAndIsIgnored", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, webhook.Verify([]string{secret}, first.header, first.body, time.Now(), 0),
			"Verify keeps no memory of ids, by design")
		require.Equal(t, http.StatusNoContent, stdReplay(t, recv.url, first, nil))
	})
	t.Run("UnderAFreshIDFailsTheSignature", func(t *testing.T) {
		t.Parallel()
		fresh := uuid.Must(uuid.NewV7()).String()
		require.Equal(t, http.StatusUnauthorized, stdReplay(t, recv.url, first, func(h http.Header) {
			h.Set(webhook.HeaderID, fresh)
		}))
		require.ErrorIs(t, webhook.Verify([]string{secret}, stdWithHeader(first.header, webhook.HeaderID, fresh),
			first.body, time.Now(), 0), webhook.ErrSignature)
		require.Zero(t, recv.effectsOf(fresh))
	})
	t.Run("WithAFreshTimestampFailsTheSignature", func(t *testing.T) {
		t.Parallel()
		later := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
		require.Equal(t, http.StatusUnauthorized, stdReplay(t, recv.url, first, func(h http.Header) {
			h.Set(webhook.HeaderTimestamp, later)
		}))
	})
	t.Run("TheBodyUnderAnotherRequestsHeadersFails", func(t *testing.T) {
		t.Parallel()
		other := pending("invoice.voided")
		require.Equal(t, delivery.KindDelivered, d.Deliver(t.Context(), other).Kind())
		swapped := stdCall{header: recv.call(t, other.ID.String()).header, body: first.body}
		require.Equal(t, http.StatusUnauthorized, stdReplay(t, recv.url, swapped, nil))
		require.Equal(t, 1, recv.effectsOf(other.ID.String()))
	})
	t.Run("AfterTheToleranceIsRefused", func(t *testing.T) {
		t.Parallel()
		// The same receiver, its clock past the tolerance.
		late := startStdReceiver(t, ib, secret, webhook.ToleranceDefault+2*time.Second)
		require.Equal(t, http.StatusUnauthorized, stdReplay(t, late.url, first, nil))
		require.Zero(t, late.effectsOf(id))
		require.ErrorIs(t, webhook.Verify([]string{secret}, first.header, first.body,
			time.Now().Add(webhook.ToleranceDefault+2*time.Second), 0), webhook.ErrTimestamp)
	})
}

func stdWithHeader(h http.Header, name, value string) http.Header {
	h = h.Clone()
	h.Set(name, value)
	return h
}

// TestWebhookVerifyComparesInConstantTime reads Verify's source: the
// signatures are compared with hmac.Equal (or subtle.ConstantTimeCompare),
// and never with ==, bytes.Equal or another comparison that stops at the
// first difference, anywhere in the signature code. Timing a comparison
// of 44 bytes in a test would only be noise.
func TestWebhookVerifyComparesInConstantTime(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "signature.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)

	var verify *ast.FuncDecl
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Verify" && fn.Recv == nil {
			verify = fn
		}
	}
	require.NotNil(t, verify, "Verify is in signature.go")

	constantTime, variableTime := 0, []string{}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, _ := sel.X.(*ast.Ident)
		if pkg == nil {
			return true
		}
		switch pkg.Name + "." + sel.Sel.Name {
		case "hmac.Equal", "subtle.ConstantTimeCompare":
			if verify.Pos() <= call.Pos() && call.End() <= verify.End() {
				constantTime++
			}
		case "bytes.Equal", "bytes.Compare", "strings.Compare", "strings.EqualFold", "reflect.DeepEqual", "slices.Equal":
			variableTime = append(variableTime, fset.Position(call.Pos()).String())
		}
		return true
	})
	require.Positive(t, constantTime, "Verify compares signatures with hmac.Equal")
	require.Empty(t, variableTime, "a comparison that can stop early, in the signature code")

	// No == or != on the received signature or the expected MAC.
	suspects := map[string]bool{"signature": true, "want": true, "expected": true}
	ast.Inspect(verify.Body, func(n ast.Node) bool {
		bin, ok := n.(*ast.BinaryExpr)
		if !ok || (bin.Op != token.EQL && bin.Op != token.NEQ) {
			return true
		}
		for _, side := range []ast.Expr{bin.X, bin.Y} {
			ast.Inspect(side, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && suspects[id.Name] {
					t.Errorf("%s: %s compared with %s", fset.Position(bin.Pos()), id.Name, bin.Op)
				}
				return true
			})
		}
		return true
	})
}
