package deliverytest

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
)

// Features says what the module under test can do.
//
// The zero value describes a module that calls no provider over the
// network (an in-app inbox): the remote subtests do not run.
type Features struct {
	// Remote: the module calls a provider over the network, so the suite
	// can stall it and make it fail.
	Remote bool
	// Dedups: the module itself keeps one effect per key (as the in-app
	// module's primary key does), so a request delivered twice leaves one
	// key where a provider would have received two.
	Dedups bool
}

// Subject is one module wired to a fake provider started for one test.
//
// Run calls Keys, Stall and Fail from the test's goroutine while the fake
// serves the module's requests on its own: they must be safe for
// concurrent use with it.
type Subject struct {
	// Delivery is the module under test.
	Delivery delivery.Delivery

	// Pending returns a request the provider accepts (a fresh ID each
	// call). Its Recipient, and each of Secrets, must be at least 4 bytes
	// long, so that the suite can look for them in reasons without
	// tripping on innocent text. Its Data must encode as JSON: the suite
	// hands the module Data as JSON decodes it, as the dispatcher does, so
	// every string in it, at any depth and of any named type, is one the
	// suite looks for.
	Pending func() delivery.Pending

	// Keys returns the idempotency keys the provider received so far, in
	// order (for mail: the Message-ID or the key header; for in-app: the
	// row ids). A request the provider stalled or failed counts too.
	Keys func() []string

	// Stall makes the provider hang on every request from now until the
	// test ends. Remote only.
	Stall func()

	// Fail makes the provider answer every request from now with this
	// status and body. Remote only. A fake of a provider that does not
	// speak HTTP maps status to its nearest answer (an SMTP 4xx or 5xx
	// reply, say) and carries body in it.
	Fail func(status int, body string)

	// Secrets are credentials the module was configured with; none may
	// appear in a reason.
	Secrets []string
}

// marker opens the text of the provider's error bodies: a reason that holds
// it quotes the body. It is short so that quoting even the body's first
// few dozen bytes gives it away.
const marker = "dtmark-4a7e"

// minSearched is the shortest value the suite looks for in a reason.
const minSearched = 4

// stallDeadline is the delivery deadline TimeoutIsRetry sets, and
// stallBound how long it waits for Deliver to return.
const (
	stallDeadline = 200 * time.Millisecond
	stallBound    = 5 * time.Second
)

// Run runs the conformance suite against the module that setup wires to a
// fresh fake provider. Each subtest calls t.Parallel and then setup with
// its own t, so setup registers its cleanups (stopping the fake, releasing
// a stall) on that t. Run itself does not call t.Parallel.
func Run(t *testing.T, f Features, setup func(t *testing.T) Subject) {
	t.Helper()

	t.Run("Delivers", func(t *testing.T) {
		t.Parallel()
		delivers(t, setup(t))
	})
	t.Run("SameIDSameKey", func(t *testing.T) {
		t.Parallel()
		sameIDSameKey(t, f, setup(t))
	})
	t.Run("CancelledContextIsRetry", func(t *testing.T) {
		t.Parallel()
		cancelledContextIsRetry(t, f, setup(t))
	})
	if !f.Remote {
		return
	}
	t.Run("TimeoutIsRetry", func(t *testing.T) {
		t.Parallel()
		timeoutIsRetry(t, setup(t), stallBound)
	})
	t.Run("ProviderErrorsStayOutOfReasons", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{500, 400} {
			t.Run(strconv.Itoa(status), func(t *testing.T) {
				t.Parallel()
				providerErrorsStayOutOfReasons(t, setup(t), status)
			})
		}
	})
}

// tb is what the checks need of a test. *testing.T has it; so does the
// self-test's recorder, which runs a check against a faulty module and
// inspects the failure.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
	Context() context.Context
}

// delivers: a valid request is Delivered, under exactly one key that
// contains its ID.
func delivers(t tb, s Subject) {
	t.Helper()
	p := pending(t, s)

	out := s.Delivery.Deliver(t.Context(), p)
	checkOutcome(t, s, p, out)
	require.Equal(t, delivery.KindDelivered, out.Kind(), "Deliver answered %s for a request the provider accepts", out)

	keys := s.Keys()
	require.Len(t, keys, 1, "the provider received %d requests for one delivery, keys %q", len(keys), keys)
	requireKeyOf(t, keys[0], p)
}

// sameIDSameKey: delivering one request twice, as its first attempt and
// its next (as the dispatcher does after a lost answer), gives the
// provider the same key twice.
func sameIDSameKey(t tb, f Features, s Subject) {
	t.Helper()
	p := pending(t, s)

	for i := range 2 {
		out := s.Delivery.Deliver(t.Context(), p)
		checkOutcome(t, s, p, out)
		require.Equal(t, delivery.KindDelivered, out.Kind(), "delivery %d of the same request answered %s", i+1, out)
		p.Attempt++
	}

	keys := s.Keys()
	if f.Dedups {
		require.Len(t, keys, 1, "two deliveries of one request left %d effects, keys %q", len(keys), keys)
		requireKeyOf(t, keys[0], p)
		return
	}
	require.Len(t, keys, 2, "the provider received %d requests for two deliveries, keys %q", len(keys), keys)
	require.Equal(t, keys[0], keys[1], "the same request went out under two idempotency keys, so the provider cannot drop the second")
	requireKeyOf(t, keys[0], p)
}

// cancelledContextIsRetry: a context cancelled before the call is a Retry,
// and a remote module sends nothing.
func cancelledContextIsRetry(t tb, f Features, s Subject) {
	t.Helper()
	p := pending(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	out := s.Delivery.Deliver(ctx, p)
	checkOutcome(t, s, p, out)
	require.Equal(t, delivery.KindRetry, out.Kind(), "Deliver answered %s on a cancelled context: the request was neither sent nor refused, so it is a Retry", out)
	if f.Remote {
		require.Empty(t, s.Keys(), "the provider received a request sent on a cancelled context")
	}
}

// timeoutIsRetry: against a provider that hangs, Deliver returns a Retry
// soon after its context's deadline, and within bound.
func timeoutIsRetry(t tb, s Subject, bound time.Duration) {
	t.Helper()
	require.NotNil(t, s.Stall, "a Remote module's Subject needs Stall")
	p := pending(t, s)
	s.Stall()
	ctx, cancel := context.WithTimeout(t.Context(), stallDeadline)
	defer cancel()

	done := make(chan delivery.Outcome, 1)
	go func() { done <- s.Delivery.Deliver(ctx, p) }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case out := <-done:
		checkOutcome(t, s, p, out)
		require.Equal(t, delivery.KindRetry, out.Kind(), "Deliver answered %s when the provider hung past the deadline", out)
	case <-timer.C:
		require.FailNowf(t, "Deliver ignores its context",
			"Deliver did not return within %s of a %s deadline while the provider hung", bound, stallDeadline)
	}
}

// providerErrorsStayOutOfReasons: a provider's error answer, whose body
// holds the marker, the recipient, the secrets and the data, is a Retry
// (5xx) or a Retry or Reject (4xx) whose reason quotes none of them.
func providerErrorsStayOutOfReasons(t tb, s Subject, status int) {
	t.Helper()
	require.NotNil(t, s.Fail, "a Remote module's Subject needs Fail")
	p := pending(t, s)
	s.Fail(status, errorBody(p, s.Secrets))

	out := s.Delivery.Deliver(t.Context(), p)
	checkOutcome(t, s, p, out)
	require.NotEmpty(t, s.Keys(), "the module answered %s without calling the provider", out)
	if status >= 500 {
		require.Equal(t, delivery.KindRetry, out.Kind(), "Deliver answered %s when the provider answered %d", out, status)
	} else {
		require.Contains(t, []delivery.Kind{delivery.KindRetry, delivery.KindReject}, out.Kind(),
			"Deliver answered %s when the provider answered %d", out, status)
	}
	if strings.Contains(strings.ToLower(out.Reason().Error()), strings.ToLower(marker)) {
		t.Errorf("the reason quotes the provider's %d body: say what failed with a status or an error code, never the body", status)
	}
}

// pending returns s.Pending(), checked to be usable by the suite.
func pending(t tb, s Subject) delivery.Pending {
	t.Helper()
	require.NotNil(t, s.Delivery, "Subject.Delivery is nil")
	require.NotNil(t, s.Pending, "Subject.Pending is nil")
	require.NotNil(t, s.Keys, "Subject.Keys is nil")
	p := s.Pending()
	require.NotEqual(t, uuid.Nil, p.ID, "Subject.Pending returned no ID")
	require.GreaterOrEqual(t, len(p.Recipient), minSearched, "Subject.Pending's Recipient must be at least %d bytes long", minSearched)
	for i, secret := range s.Secrets {
		require.GreaterOrEqual(t, len(secret), minSearched, "Subject.Secrets[%d] must be at least %d bytes long", i, minSearched)
	}
	// A one-time code the template could render: never in a reason.
	p.Secrets = maps.Clone(p.Secrets)
	if p.Secrets == nil {
		p.Secrets = map[string]string{}
	}
	p.Secrets[plantedSecretKey] = "dtcode-" + p.ID.String()[:8]
	if p.Data != nil {
		b, err := json.Marshal(p.Data)
		require.NoError(t, err, "Subject.Pending's Data does not encode as JSON")
		p.Data = nil
		require.NoError(t, json.Unmarshal(b, &p.Data), "Subject.Pending's Data does not decode from JSON")
	}
	return p
}

// requireKeyOf checks that key, as the provider received it, carries p.ID.
func requireKeyOf(t tb, key string, p delivery.Pending) {
	t.Helper()
	require.True(t, strings.Contains(strings.ToLower(key), p.ID.String()),
		"the provider's idempotency key %q does not contain Pending.ID %s", key, p.ID)
}

// checkOutcome fails t unless out is an answer, and reports each thing a
// reason (or a delivered outcome's reference) must never hold and does:
// the recipient, a secret, a string of the data.
func checkOutcome(t tb, s Subject, p delivery.Pending, out delivery.Outcome) {
	t.Helper()
	require.NotEqual(t, delivery.KindInvalid, out.Kind(), "Deliver returned the zero Outcome, which is not an answer")

	what, text := "reference", out.Reference()
	if out.Kind() != delivery.KindDelivered {
		require.Error(t, out.Reason(), "a %s without a reason", out.Kind())
		what, text = "reason", out.Reason().Error()
	}
	text = strings.ToLower(text)
	if strings.Contains(text, strings.ToLower(p.Recipient)) {
		t.Errorf("the %s names the recipient: %s", what, out)
	}
	for i, secret := range s.Secrets {
		if strings.Contains(text, strings.ToLower(secret)) {
			t.Errorf("the %s holds Subject.Secrets[%d]: %s", what, i, out)
		}
	}
	for _, v := range dataStrings(p.Data) {
		if len(v) >= minSearched && strings.Contains(text, strings.ToLower(v)) {
			t.Errorf("the %s holds the template data value %q: %s", what, v, out)
		}
	}
	for k, v := range p.Secrets {
		if len(v) >= minSearched && strings.Contains(text, strings.ToLower(v)) {
			t.Errorf("the %s holds the secret %q of Pending.Secrets: %s", what, k, out)
		}
	}
}

// plantedSecretKey is the key of the secret the suite adds to every
// request's Secrets, as a verification code would be.
const plantedSecretKey = "deliverytest_code"

// dataStrings returns the strings among data's values, nested maps and
// slices included, sorted. data is as JSON decodes it (see pending).
func dataStrings(data map[string]any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(data)
	slices.Sort(out)
	return out
}

// errorBody is a provider's error answer that quotes everything a reason
// must not hold, under the field names providers use for messages.
func errorBody(p delivery.Pending, secrets []string) string {
	text := marker + "; recipient " + p.Recipient +
		"; credentials " + strings.Join(secrets, " ") +
		"; data " + strings.Join(dataStrings(p.Data), " ") +
		"; code " + strings.Join(slices.Sorted(maps.Values(p.Secrets)), " ")
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Encoding a map of strings cannot fail.
	_ = enc.Encode(map[string]any{
		"message": text,
		"error":   text,
		"detail":  text,
		"errors":  []any{map[string]any{"message": text}},
	})
	return b.String()
}
