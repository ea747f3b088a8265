package notification_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

// Stage the notifications of a business event in the write that makes it
// happen: one request per recipient and channel, all in one transaction.
func ExampleStageBatch() {
	ctx, db := exampleSetup()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `UPDATE bookings SET status = 'confirmed' WHERE id = $1`, 7); err != nil {
		panic(err)
	}
	data := map[string]any{"booking_id": 7, "starts_at": "2026-12-01T09:00:00Z"}
	ids, err := notification.StageBatch(ctx, tx, "bookings", []notification.Request{
		{Channel: "mail", Recipient: "driver@example.com", Template: "booking_confirmed", Data: data},
		{Channel: "push", Recipient: "ExponentPushToken[xxxx]", Template: "booking_confirmed", Data: data},
		{Channel: "mail", Recipient: "host@example.com", Template: "booking_confirmed_host", Data: data},
	})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	fmt.Println("staged", len(ids), "notifications")
}

// A reminder 15 minutes before a booking ends, cancelled if the booking is.
// An API process needs only a Client: no deliveries, no relay.
func ExampleClient_Cancel() {
	ctx, db := exampleSetup()
	c, err := notification.NewClient(db, nil)
	if err != nil {
		panic(err)
	}
	ends := time.Now().Add(2 * time.Hour)
	id, err := c.Stage(ctx, db, "bookings", notification.Request{
		Channel: "push", Recipient: "ExponentPushToken[xxxx]", Template: "ending_soon",
		NotBefore: ends.Add(-15 * time.Minute),
	})
	if err != nil {
		panic(err)
	}
	st, err := c.Cancel(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(st.State) // cancelled, or the state it had already reached
}

// A service main: the dispatcher is the relay's sink. The pool, the schema
// and the module are named once, for the relay; the dispatcher takes them
// from it.
func ExampleNewDispatcher() {
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

	mail := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		// Render p.Template with p.Data and send it, giving p.ID to the
		// provider as its idempotency key.
		return delivery.Delivered()
	})
	d, err := notification.NewDispatcher(&notification.Config{
		Deliveries: map[string]delivery.Delivery{"mail": mail},
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Supervise(ctx, db, &relay.Config{Module: "bookings", Listener: pqlisten.New(dsn)}, d); err != nil {
		panic(err)
	}
}

// Ask how a staged request went, waiting until it is settled.
func ExampleClient_Wait() {
	ctx, db := exampleSetup()
	c, err := notification.NewClient(db, nil)
	if err != nil {
		panic(err)
	}
	id, err := c.Stage(ctx, db, "bookings", notification.Request{Channel: "mail", Recipient: "driver@example.com"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := c.Wait(ctx, id)
	switch {
	case err != nil:
		fmt.Println("still", st.State, "after", st.Attempts, "attempts; last error:", st.LastError)
	case st.State == relay.StateProcessed:
		fmt.Println("delivered at", st.SettledAt, "provider reference", st.Result)
	default:
		fmt.Println(st.State, st.Reason)
	}
}

func exampleSetup() (context.Context, *sql.DB) {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	return context.Background(), db
}

// Mount the receivers of a provider's reports on the service's mux: each
// report is staged for the bookings relay, whose dispatcher applies it
// once (a hard bounce suppresses the address, an SMS STOP the number).
func ExampleClient_FeedbackStore() {
	_, db := exampleSetup()
	c, err := notification.NewClient(db, nil)
	if err != nil {
		panic(err)
	}
	store, err := c.FeedbackStore("bookings")
	if err != nil {
		panic(err)
	}
	resend, err := feedback.NewResend(&feedback.ResendConfig{Secrets: []string{os.Getenv("RESEND_WEBHOOK_SECRET")}}, store)
	if err != nil {
		panic(err)
	}
	twilio, err := feedback.NewTwilio(&feedback.TwilioConfig{URL: "https://api.example.com/feedback/twilio",
		AuthTokens: []string{os.Getenv("TWILIO_AUTH_TOKEN")}}, store)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /feedback/resend", resend)
	mux.Handle("POST /feedback/twilio", twilio)
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	panic(srv.ListenAndServe())
}

// An unsubscribe link: the suppression commits with the rest of what the
// click changes, and no marketing mail goes to the address from then on.
func ExampleClient_Suppress() {
	ctx, db := exampleSetup()
	c, err := notification.NewClient(db, nil)
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := c.Suppress(ctx, tx, notification.Suppression{Channel: "mail", Address: "driver@example.com",
		Scope: "marketing", Source: "unsubscribe link"}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}

// A settings page: the person turns marketing push off and keeps their
// nights quiet for texts, in the write that saves the page. The
// dispatcher reads both when it delivers, in the claim's statement.
func ExampleClient_SetPreference() {
	ctx, db := exampleSetup()
	c, err := notification.NewClient(db, nil)
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := c.SetPreference(ctx, tx, "user-42", notification.Preference{
		Category: "marketing", Channel: "push", Enabled: false}); err != nil {
		panic(err)
	}
	if err := c.SetQuietHours(ctx, tx, "user-42", notification.QuietHours{TimeZone: "Europe/Berlin",
		Windows: []notification.QuietWindow{{Start: notification.At(22, 0), End: notification.At(7, 0),
			Channels: []string{"sms"}}}}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}

// After an outage: what died of it, by cause, and back into the queue
// once the provider is up again, under the same ids.
func ExampleClient_Reemit() {
	ctx, db := exampleSetup()
	c, err := notification.NewClient(db, nil)
	if err != nil {
		panic(err)
	}
	since := time.Now().Add(-2 * time.Hour)
	groups, err := c.CountDead(ctx, &notification.DeadFilter{Since: since}, relay.ByCode)
	if err != nil {
		panic(err)
	}
	for _, g := range groups {
		fmt.Println(g.Key, g.Count, "dead, the last at", g.Last)
	}
	outage := &notification.DeadFilter{Channel: "sms", Code: delivery.CodeUnavailable, Since: since}
	dead, err := c.ListDead(ctx, outage)
	if err != nil {
		panic(err)
	}
	for _, d := range dead {
		fmt.Println(d.ID, d.Template, d.Reason) // never d.Recipient: personal data
	}
	n, err := c.Reemit(ctx, outage)
	if err != nil {
		panic(err)
	}
	fmt.Println("re-emitted", n)
}
