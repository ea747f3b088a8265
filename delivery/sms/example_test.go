package sms_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/sms"
)

// A service registers its texts once, and the dispatcher delivers the
// "sms" channel through them. Here one request is delivered by hand, as the
// dispatcher would.
func ExampleNew() {
	texts, err := sms.New(&sms.Config{
		AccountSID:          os.Getenv("TWILIO_ACCOUNT_SID"),
		AuthToken:           os.Getenv("TWILIO_AUTH_TOKEN"),
		MessagingServiceSID: os.Getenv("TWILIO_MESSAGING_SERVICE_SID"),
		Templates: map[string]string{
			"login.code": "Your sign-in code is {{.code}}. It expires in {{.minutes}} minutes.",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// For notification.Config.Deliveries:
	deliveries := map[string]delivery.Delivery{"sms": texts}

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	outcome := deliveries["sms"].Deliver(ctx, delivery.Pending{
		ID:        uuid.Must(uuid.NewV7()), // the dispatcher passes the outbox row's id
		Channel:   "sms",
		Recipient: "+14155550100",
		Template:  "login.code",
		Data:      map[string]any{"code": "739104", "minutes": 10},
		Attempt:   1,
	})
	fmt.Println(outcome) // "delivered (reference SM...)", never the number or the code
}
