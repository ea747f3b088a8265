package inapp_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/deliverytest"
)

// The in-app module is no remote provider: its "keys" are the ids of the
// rows it wrote, one per request however often it is delivered.
func TestConformance(t *testing.T) {
	t.Parallel()
	deliverytest.Run(t, deliverytest.Features{Remote: false, Dedups: true}, func(t *testing.T) deliverytest.Subject {
		b := setup(t)
		var written []string
		return deliverytest.Subject{
			Delivery: b.inapp,
			Pending: func() delivery.Pending {
				return delivery.Pending{ID: uuid.Must(uuid.NewV7()), Channel: "inapp", Recipient: "user-42",
					Template: "welcome", Data: map[string]any{"name": "Ada"}, Attempt: 1, StagedAt: time.Now()}
			},
			Keys: func() []string {
				rows, err := b.db.QueryContext(t.Context(), `SELECT id FROM "`+b.schema+`".inapp_notifications ORDER BY created_at, id`)
				require.NoError(t, err)
				defer rows.Close()
				written = written[:0]
				for rows.Next() {
					var id string
					require.NoError(t, rows.Scan(&id))
					written = append(written, id)
				}
				require.NoError(t, rows.Err())
				return written
			},
		}
	})
}
