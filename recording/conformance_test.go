package recording_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/deliverytest"
	"github.com/tidings-go/tidings/recording"
)

// The double passes the suite every module passes: its "keys" are the ids
// of the requests it recorded, one per call.
func TestConformance(t *testing.T) {
	t.Parallel()
	deliverytest.Run(t, deliverytest.Features{}, func(t *testing.T) deliverytest.Subject {
		rec := recording.New()
		return deliverytest.Subject{
			Delivery: rec,
			Pending: func() delivery.Pending {
				return delivery.Pending{ID: uuid.Must(uuid.NewV7()), Channel: "mail", Recipient: "ada@example.com",
					Template: "welcome", Data: map[string]any{"name": "Ada"}, Attempt: 1, StagedAt: time.Now()}
			},
			Keys: func() []string {
				var keys []string
				for _, p := range rec.Requests() {
					keys = append(keys, p.ID.String())
				}
				return keys
			},
		}
	})
}
