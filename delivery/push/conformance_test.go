package push_test

import (
	"testing"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/deliverytest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	deliverytest.Run(t, deliverytest.Features{Remote: true}, func(t *testing.T) deliverytest.Subject {
		b := setup(t)
		return deliverytest.Subject{
			Delivery: b.pusher,
			Pending:  func() delivery.Pending { return newPending("comment", commentData()) },
			Keys:     b.expo.keys,
			Stall:    b.expo.Stall,
			Fail:     func(status int, body string) { b.expo.FailWith(status, body) },
			Secrets:  []string{testAccessToken},
		}
	})
}
