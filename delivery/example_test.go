package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
)

var errSMSBusy = errors.New("sms: provider answered 429")

// A delivery built from a plain function. It answers Reject for a request it
// can never send, RetryAfter when the provider asks for a wait, and Delivered
// with the provider's receipt otherwise. The request's ID would go to the
// provider as its idempotency key.
func ExampleFunc() {
	sms := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		if p.Recipient == "" {
			// The reason names what failed, never the recipient.
			return delivery.Reject(errors.New("sms: no phone number"))
		}
		if p.Attempt == 1 {
			return delivery.RetryAfter(errSMSBusy, 30*time.Second)
		}
		return delivery.DeliveredWithReference("SM" + p.ID.String()[:8])
	})

	ctx := context.Background()
	p := examplePending()

	fmt.Println(sms.Deliver(ctx, delivery.Pending{ID: p.ID, Channel: "sms", Attempt: 1}))
	fmt.Println(sms.Deliver(ctx, p))
	p.Attempt++
	fmt.Println(sms.Deliver(ctx, p))
	// Output:
	// reject: sms: no phone number
	// retry after 30s: sms: provider answered 429
	// delivered (reference SM0190b9a4)
}

// examplePending returns a fixed request, so the example's output is stable.
func examplePending() delivery.Pending {
	return delivery.Pending{
		ID:        uuid.MustParse("0190b9a4-7c2e-7d1a-9c3b-5e6f7a8b9c0d"),
		Channel:   "sms",
		Recipient: "+15550100",
		Template:  "login-code",
		Data:      map[string]any{"code": "123456"},
		Attempt:   1,
	}
}
