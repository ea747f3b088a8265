package webhook_test

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidings-go/tidings/delivery/webhook"
)

// FuzzVerify checks two properties of Verify: whatever the headers and the
// body, it returns nil or one of its three sentinels, without panicking;
// and whatever Sign signs, Verify accepts, and refuses once the body
// changes.
func FuzzVerify(f *testing.F) {
	for _, c := range verifyCases(f) {
		f.Add(c.id, c.timestamp, c.signature, []byte(c.body), c.now, int64(c.tolerance))
	}
	// Edge cases the table does not cover.
	f.Add("", "", "", []byte(nil), int64(0), int64(0))                                          // nothing at all
	f.Add("msg_1", "0", "v1,", []byte("{}"), int64(0), int64(0))                                // the epoch, an empty signature
	f.Add("msg_1", "9223372036854775807", "v1,x", []byte("{}"), int64(math.MaxInt64), int64(0)) // the last second int64 holds
	f.Add("msg_1", "1", ",,, v1,,v1 , ,v1", []byte("{}"), int64(math.MinInt64), int64(math.MaxInt64))
	f.Add("a.b", "1", "v1,AAAA", []byte(".1.x"), int64(1), int64(-1)) // a dot in the id
	f.Add(" msg 1 ", "0001", strings.Repeat("v1,x ", 64), []byte("\x00\xff"), int64(1), int64(1))

	secrets := []string{secretA, secretB}
	f.Fuzz(func(t *testing.T, id, timestamp, signature string, body []byte, now int64, tolerance int64) {
		clock := time.Unix(now, 0)
		tol := time.Duration(tolerance)

		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, timestamp)
		h.Set(webhook.HeaderSignature, signature)
		err := webhook.Verify(secrets, h, body, clock, tol)
		if err != nil && !errors.Is(err, webhook.ErrMissingHeaders) && !errors.Is(err, webhook.ErrTimestamp) &&
			!errors.Is(err, webhook.ErrSignature) {
			t.Fatalf("Verify returned an error outside its sentinels: %v", err)
		}

		// Round trip: sign with the module's own function, verify.
		signed, err := webhook.Sign(secrets, id, clock, body)
		if err != nil {
			if id != "" && !strings.Contains(id, ".") && now >= 0 {
				t.Fatalf("Sign refused a message it should sign: %v", err)
			}
			return
		}
		h = http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now, 10))
		h.Set(webhook.HeaderSignature, signed)
		if err := webhook.Verify(secrets, h, body, clock, tol); err != nil {
			t.Fatalf("Verify refused what Sign signed: %v", err)
		}
		if err := webhook.Verify(secrets[1:], h, body, clock, tol); err != nil {
			t.Fatalf("Verify with the second secret alone refused what Sign signed: %v", err)
		}
		tampered := append(append([]byte(nil), body...), 'x')
		if err := webhook.Verify(secrets, h, tampered, clock, tol); !errors.Is(err, webhook.ErrSignature) {
			t.Fatalf("Verify of a changed body = %v, want ErrSignature", err)
		}
	})
}
