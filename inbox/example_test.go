package inbox_test

import (
	"context"
	"database/sql"
	"log"
	"os"

	"github.com/google/uuid"
	_ "github.com/lib/pq" // the PostgreSQL driver

	"github.com/tidings-go/tidings/inbox"
)

// A consumer charges an order once, however often the "order.placed" event
// reaches it: it claims the event in the transaction that records the
// charge, so the claim and the charge commit, or roll back, together.
func ExampleInbox_Once() {
	ctx := context.Background()
	db := exampleDB()
	ev := exampleEvent()

	ib, err := inbox.New("tidings")
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op once committed

	first, err := ib.Once(ctx, tx, "billing", ev.ID)
	if err != nil {
		log.Fatal(err)
	}
	if !first {
		return // a redelivery: a committed transaction already charged it
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO shop.charges (order_id, amount_cents) VALUES ($1, $2)`,
		ev.OrderID, ev.AmountCents); err != nil {
		log.Fatal(err) // the claim rolls back with the charge: a redelivery retries both
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// orderPlaced is the event of the example, as a relay sink decodes it.
type orderPlaced struct {
	ID          uuid.UUID // the outbox record's id: the same on every delivery
	OrderID     int64
	AmountCents int64
}

func exampleDB() *sql.DB {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	return db
}

func exampleEvent() orderPlaced {
	return orderPlaced{ID: uuid.MustParse("01907c2e-5b1a-7c3d-8e4f-a1b2c3d4e5f6"), OrderID: 42, AmountCents: 1999}
}
