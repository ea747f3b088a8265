package main

import (
	"bytes"
	"context"
	"database/sql"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The demo is the end-to-end test of the example service: three bookings
// confirmed through the API under every recipient rule, every channel
// delivered where the rules let it, the security notices delivered, the
// verification code gone from the database, the invalid number dead with
// Twilio's code, and delivered once re-emitted. Then the providers'
// signed reports: a hard bounce posted to the Resend receiver, noted on
// the timeline of the mail it is about, and the next mail to the address
// suppressed without reaching the SMTP server; an Expo receipt saying
// DeviceNotRegistered, and the next push to the token suppressed without
// reaching Expo; a STOP posted to the Twilio receiver suppressing the
// number's next text, and a START letting the one after through.
func TestDemo(t *testing.T) {
	t.Setenv("DATABASE_URL", "") // a throwaway cluster of its own
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out), out.String())
	got := out.String()
	t.Log(got)
	require.Contains(t, got, "delivered 13, skipped 8 (alan's, and hopper's pushes), duplicate 6, dead 1")
	require.Regexp(t, `duplicate [0-9a-f-]{36}: of [0-9a-f-]{36}, the first receipt \S+`, got)
	require.Regexp(t, `ada's booking text: deferred at [0-9:]+ by quiet hours [0-9:]+-[0-9:]+ \(sms\) until`, got)
	require.Contains(t, got, "ada's booking text: delivered at")
	require.Contains(t, got, "mail  5:")
	require.Contains(t, got, "push  2 ")
	require.Contains(t, got, "sms   1 ")
	require.Contains(t, got, "each mail carried its request's id as Resend-Idempotency-Key, for Resend to drop a repeat")
	require.Contains(t, got, "inapp alan: 0")
	require.Contains(t, got, "inapp hopper: 3")
	require.Contains(t, got, "password-changed mail to alan, who turned everything off: delivered")
	require.Contains(t, got, "verification code to ada: delivered, the text carried a 6-digit code; rows in the database holding it now: 0")
	require.Contains(t, got, "twilio rejected the message (400): error 21211")
	require.NotContains(t, got, "+15005550001", "the dead reason does not quote the number")
	require.Regexp(t, `processed \(provider reference SM0+3\); sms received 3`, got)

	require.Regexp(t, `resend: grace's booking mail [0-9a-f-]{36} bounced \(Permanent\); email.bounced, signed with Svix, `+
		`posted to /feedback/resend: 204`, got)
	require.Contains(t, got, "mail to grace@drivers.example suppressed (class permanent, reason bounce.permanent, reported by resend)")
	require.Regexp(t, `the bounced mail's request [0-9a-f-]{36}: its timeline notes feedback bounce.permanent \(resend email.bounced\)`, got)
	require.Contains(t, got, "password-changed mail to grace: suppressed (policy.suppressed); the SMTP server received no new message")
	require.Regexp(t, `expo: the receipt of ticket-[12], fetched a second after the push, says DeviceNotRegistered`, got)
	require.Contains(t, got, "push to ExponentPushToken[grace-device] suppressed (class permanent, reason expo.device_not_registered, reported by expo)")
	require.Contains(t, got, "booking 4 for grace confirmed: her push suppressed (policy.suppressed), her mail suppressed, her text delivered; "+
		"Expo received no new push")
	require.Contains(t, got, "twilio: alan texted STOP; the incoming message, signed, posted to /feedback/twilio: 200")
	require.Contains(t, got, "sms to +15005550007 suppressed (class unsubscribe, reason unsubscribe, reported by twilio)")
	require.Contains(t, got, "verification code to alan: suppressed (policy.suppressed); Twilio received no new text")
	require.Contains(t, got, "twilio: alan texted START, posted to /feedback/twilio: 200")
	require.Contains(t, got, "sms to +15005550007 no longer suppressed")
	require.Regexp(t, `verification code to alan: delivered \(provider reference SM0+5\); Twilio received 1 new text\n`, got)
	require.Contains(t, got, "each of the 5 texts named the service's /feedback/twilio as its StatusCallback")
}

// rowsHolding finds a code stored as text, in JSON or as the bytes of a
// bytea, and takes for it neither the microseconds of a time nor a
// longer number nor the same digits off a byte boundary.
func TestRowsHolding(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, func(ctx context.Context, db *sql.DB, schema string) error {
		s := pq.QuoteIdentifier(schema)
		_, err := db.ExecContext(ctx, `CREATE SCHEMA `+s+`; CREATE TABLE `+s+`.kept (t text, j jsonb, b bytea, at timestamptz)`)
		return err
	})
	db := pgtest.DB(t)
	_, err := db.ExecContext(t.Context(), `INSERT INTO `+pq.QuoteIdentifier(schema)+`.kept (t, j, b, at) VALUES
		('Your parking verification code is 123456.', NULL, NULL, NULL),
		(NULL, '{"code": "123456"}', NULL, NULL),
		(NULL, NULL, convert_to('{"code":"123456"}', 'UTF8'), NULL),
		(NULL, NULL, '\x00313233343536ff', NULL),
		('2026-12-04 19:55:36.123456+00', '{"at": "2026-12-04T19:55:36.123456Z"}', NULL, '2026-12-04 19:55:36.123456+00'),
		('91234567', '{"n": 1234567}', convert_to('0123456', 'UTF8'), NULL),
		(NULL, NULL, '\xaaa313233343536aaa', NULL)`)
	require.NoError(t, err)

	n, err := rowsHolding(t.Context(), db, "123456", schema)
	require.NoError(t, err)
	require.Equal(t, 4, n, "the first four rows hold the code")
	n, err = rowsHolding(t.Context(), db, "654321", schema)
	require.NoError(t, err)
	require.Zero(t, n)
}

// On a database that holds an earlier run's users, the story could not
// happen again (grace's address stays suppressed): the demo says so
// before it starts anything.
func TestDemoRefusesAnEarlierRunsDatabase(t *testing.T) {
	db := pgtest.AdminDB(t)
	_, err := db.ExecContext(t.Context(), `CREATE SCHEMA bookings;
		CREATE TABLE bookings.users (id text PRIMARY KEY);
		INSERT INTO bookings.users VALUES ('grace')`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA bookings CASCADE`) })
	t.Setenv("DATABASE_URL", pgtest.AdminURL(t))
	var out bytes.Buffer
	require.ErrorContains(t, run(t.Context(), &out), "the database holds an earlier demo run's users")
}
