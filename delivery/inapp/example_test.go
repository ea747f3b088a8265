package inapp_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/google/uuid"
	_ "github.com/lib/pq" // the PostgreSQL driver

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

// A service creates the library's tables and the in-app table, stages a
// notification for a user inside the write that causes it, and runs a
// relay whose dispatcher delivers the "inapp" channel.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db := exampleDB()

	// Two migrations: the outbox and inbox, then the in-app table.
	if err := tidings.Migrate(ctx, db, ""); err != nil {
		log.Fatal(err)
	}
	if err := inapp.Migrate(ctx, db, ""); err != nil {
		log.Fatal(err)
	}

	// In the write that causes it: the notification exists if the write
	// commits.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op once committed
	// ... the application's own write ...
	if _, err := notification.Stage(ctx, tx, "app", notification.Request{
		Channel:   "inapp",
		Recipient: "user-42", // the user's id
		Template:  "comment.new",
		Data:      map[string]any{"post": "Release notes", "author": "Ada"},
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// The relay hands it to the dispatcher, which writes it into the
	// in-app table with its claim, until interrupted.
	inbox, err := inapp.New(&inapp.Config{DB: db})
	if err != nil {
		log.Fatal(err)
	}
	dispatcher, err := notification.NewDispatcher(&notification.Config{
		Deliveries: map[string]delivery.Delivery{"inapp": inbox},
	})
	if err != nil {
		log.Fatal(err)
	}
	cfg := &relay.Config{Module: "app", Listener: pqlisten.New(os.Getenv("DATABASE_URL"))}
	if err := relay.Supervise(ctx, db, cfg, dispatcher); err != nil {
		log.Fatal(err)
	}
}

// A handler shows the signed-in user a page of their unread notifications,
// gives the client a cursor for the next page, and marks the page read.
func ExampleDelivery_List() {
	ctx := context.Background()
	inbox, err := inapp.New(&inapp.Config{DB: exampleDB()})
	if err != nil {
		log.Fatal(err)
	}
	user := "user-42"     // from the authenticated session, never the client
	var next inapp.Cursor // from the client's previous page; zero for the first
	if err := next.UnmarshalText([]byte(os.Getenv("CURSOR"))); err != nil {
		log.Fatal(err)
	}

	page, err := inbox.List(ctx, user, &inapp.ListOpts{UnreadOnly: true, Limit: 20, Before: next})
	if err != nil {
		log.Fatal(err)
	}
	unread, err := inbox.UnreadCount(ctx, user)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d unread\n", unread)
	for _, n := range page {
		fmt.Println(n.CreatedAt.Format("Jan 2 15:04"), n.Template, n.Data["post"])
	}
	if len(page) == 20 {
		fmt.Println("next page:", page[len(page)-1].Cursor())
	}

	ids := make([]uuid.UUID, len(page))
	for i, n := range page {
		ids[i] = n.ID
	}
	if _, err := inbox.MarkRead(ctx, user, ids...); err != nil {
		log.Fatal(err)
	}
}

func exampleDB() *sql.DB {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	return db
}
