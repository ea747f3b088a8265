package sms_test

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
			Delivery: b.sender,
			Pending:  func() delivery.Pending { return newPending("otp", otpData()) },
			Keys:     b.twilio.keys,
			Stall:    b.twilio.Stall,
			Fail:     func(status int, body string) { b.twilio.FailWith(status, body) },
			Secrets:  []string{testAuthToken},
		}
	})
}
