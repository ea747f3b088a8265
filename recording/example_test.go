package recording_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/recording"
)

// A recording delivery scripted to answer Retry once: the first hand of a
// request is retried, the second is delivered, and both are recorded.
func ExampleDelivery() {
	rec := recording.New()
	rec.Script(delivery.Retry(errors.New("mail: provider answered 503")))

	ctx := context.Background()
	p := delivery.Pending{
		ID:        uuid.MustParse("0190b9a4-7c2e-7d1a-9c3b-5e6f7a8b9c0d"),
		Channel:   "mail",
		Recipient: "ada@example.com",
		Template:  "welcome",
		Attempt:   1,
	}

	fmt.Println(rec.Deliver(ctx, p))
	p.Attempt++
	fmt.Println(rec.Deliver(ctx, p))

	fmt.Println("handed:", rec.Count(p.ID))
	for _, r := range rec.Requests() {
		fmt.Println("attempt", r.Attempt, "on", r.Channel)
	}
	// Output:
	// retry: mail: provider answered 503
	// delivered
	// handed: 2
	// attempt 1 on mail
	// attempt 2 on mail
}
