package notificationtest_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/notificationtest"
)

// confirmBooking is the application code under test: it confirms a booking
// and stages the driver's mail in the same transaction.
func confirmBooking(ctx context.Context, db *sql.DB, notes *notification.Client, id int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `UPDATE bookings SET status = 'confirmed' WHERE id = $1`, id); err != nil {
		return err
	}
	if _, err := notes.Stage(ctx, tx, "bookings", notification.Request{
		Channel: "mail", Recipient: "driver@example.com", Template: "booking_confirmed",
		Data: map[string]any{"booking_id": id},
	}); err != nil {
		return err
	}
	return tx.Commit()
}

// An application's test asserts what the code under test staged, without a
// relay or a provider: the confirmation mail to the driver, and no SMS.
func Example() {
	testConfirmBooking := func(t *testing.T) {
		db, err := sql.Open("postgres", os.Getenv("TEST_DATABASE_URL"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })     // after Schema's drop, which is registered later
		schema := notificationtest.Schema(t, db) // a fresh schema with the library's tables
		notes, err := notification.NewClient(db, &notification.ClientConfig{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}

		staged := notificationtest.New(t, db, schema)
		if err := confirmBooking(t.Context(), db, notes, 7); err != nil {
			t.Fatal(err)
		}
		staged.Require(t, notificationtest.Want{
			Channel: "mail", Recipient: "driver@example.com", Template: "booking_confirmed",
			Data: map[string]any{"booking_id": 7},
		})
		staged.RequireNone(t, notificationtest.Want{Channel: "sms"})
	}
	_ = testConfirmBooking // in an application: func TestConfirmBooking(t *testing.T) { ... }
}
