package push_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/push"
)

// A service registers its notifications once, and the dispatcher delivers
// the "push" channel through them. Here one request is delivered by hand,
// as the dispatcher would.
func ExampleNew() {
	pushes, err := push.New(&push.Config{
		AccessToken: os.Getenv("EXPO_ACCESS_TOKEN"), // empty unless the project requires one
		Templates: map[string]push.Template{
			"comment.new": {
				Title: "{{.author}} commented",
				Body:  "{{.author}} on {{.post}}: {{.excerpt}}",
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// For notification.Config.Deliveries:
	deliveries := map[string]delivery.Delivery{"push": pushes}

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	outcome := deliveries["push"].Deliver(ctx, delivery.Pending{
		ID:        uuid.Must(uuid.NewV7()), // the dispatcher passes the outbox row's id
		Channel:   "push",
		Recipient: "ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]", // from the app
		Template:  "comment.new",
		Data:      map[string]any{"author": "Ada", "post": "Release notes", "excerpt": "Nice work"},
		Attempt:   1,
	})
	fmt.Println(outcome) // "delivered (reference <ticket id>)", never the token or the text
}
