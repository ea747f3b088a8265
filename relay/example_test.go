package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

// Stage a record inside the application's own write: it exists if and only
// if the write commits, and the relay is woken at that commit.
func ExampleStage() {
	ctx, db := exampleSetup()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'placed' WHERE id = $1`, 42); err != nil {
		panic(err)
	}
	id, err := relay.Stage(ctx, tx, relay.Message{
		Module:  "shop",
		Kind:    "order.placed",
		Payload: json.RawMessage(`{"order_id": 42}`),
	})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	fmt.Println("staged", id)
}

// Many concurrent writers: stage without the NOTIFY, which would make
// their commits take turns, and wake the relay once each commit returned.
func ExampleWaker() {
	ctx, db := exampleSetup()
	ob, err := relay.NewOutbox(nil)
	if err != nil {
		panic(err)
	}
	waker := ob.NewWaker(db) // one per process, shared by every writer
	defer func() { _ = waker.Close() }()

	quiet := ob.WithoutWakeUp()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := quiet.Stage(ctx, tx, relay.Message{
		Module: "shop", Kind: "order.placed", Payload: json.RawMessage(`{"order_id": 42}`),
	}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	waker.Wake("shop")
}

// A service main: migrate, then run the relay of one module until SIGTERM.
func ExampleSupervise() {
	dsn := os.Getenv("DATABASE_URL")
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := tidings.Migrate(ctx, db, ""); err != nil {
		panic(err)
	}

	sink := relay.SinkFunc(func(ctx context.Context, rec relay.Record) relay.Result {
		var order struct {
			OrderID int `json:"order_id"`
		}
		if err := json.Unmarshal(rec.Payload, &order); err != nil {
			return relay.Dead(fmt.Errorf("undecodable %s: %w", rec.Kind, err))
		}
		// ... act on the order, idempotently: rec.ID is stable ...
		return relay.Done()
	})
	err = relay.Supervise(ctx, db, &relay.Config{
		Module:   "shop",
		Listener: pqlisten.New(dsn), // woken at commit; the sweep is the safety net
		Logger:   slog.New(slog.NewJSONHandler(os.Stderr, nil)),
	}, sink)
	if err != nil {
		panic(err) // an invalid config or an unreadable outbox; later failures are retried
	}
}

// Operate: list what died and why, then re-emit it once the cause is fixed.
func ExampleOutbox_Reemit() {
	ctx, db := exampleSetup()
	ob, err := relay.NewOutbox(nil) // the default schema
	if err != nil {
		panic(err)
	}
	dead, err := ob.ListDead(ctx, db, &relay.DeadFilter{Module: "shop", Kind: "order.placed"})
	if err != nil {
		panic(err)
	}
	for _, d := range dead {
		fmt.Println(d.ID, d.Attempts, d.Reason)
	}
	n, err := ob.Reemit(ctx, db, &relay.DeadFilter{Module: "shop", Kind: "order.placed"})
	if err != nil && !errors.Is(err, context.Canceled) {
		panic(err)
	}
	fmt.Println("re-emitted", n)
}

// exampleSetup stands for the application's own context and pool.
func exampleSetup() (context.Context, *sql.DB) {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	return context.Background(), db
}
