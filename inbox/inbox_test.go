package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
)

const consumer = "billing"

type testBundle struct {
	db     *sql.DB
	schema string
	ib     *inbox.Inbox
}

// setup gives the test a schema of its own holding an inbox table, and the
// Inbox of that schema.
func setup(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, inbox.Migrate)
	ib, err := inbox.New(schema)
	require.NoError(t, err)
	return testBundle{db: pgtest.DB(t), schema: schema, ib: ib}
}

// begin starts a transaction that is rolled back when the test ends unless
// it was committed or rolled back before.
func (b testBundle) begin(t *testing.T) *sql.Tx {
	t.Helper()
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// claim claims (consumer, id) in a transaction of its own and commits it.
func (b testBundle) claim(t *testing.T, consumer string, id uuid.UUID) bool {
	t.Helper()
	tx := b.begin(t)
	first, err := b.ib.Once(t.Context(), tx, consumer, id)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return first
}

// count returns the number of committed claims matching where.
func (b testBundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM "`+b.schema+`".inbox WHERE `+where, args...).Scan(&n))
	return n
}

// backendPID returns the server process of tx's connection.
func backendPID(t *testing.T, tx *sql.Tx) int {
	t.Helper()
	var pid int
	require.NoError(t, tx.QueryRowContext(t.Context(), `SELECT pg_catalog.pg_backend_pid()`).Scan(&pid))
	return pid
}

// waitBlocked waits, with a deadline, until the server process waiter waits
// on a lock that holder holds: pg_stat_activity shows it waiting on a Lock,
// pg_locks shows its ungranted lock, and pg_blocking_pids names holder.
func waitBlocked(t *testing.T, db *sql.DB, waiter, holder int) {
	t.Helper()
	const query = `SELECT
		EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
			WHERE pid = $1 AND wait_event_type = 'Lock')
		AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE pid = $1 AND NOT granted)
		AND $2 = ANY (pg_catalog.pg_blocking_pids($1))`
	require.Eventually(t, func() bool {
		var blocked bool
		err := db.QueryRowContext(t.Context(), query, waiter, holder).Scan(&blocked)
		return err == nil && blocked
	}, 10*time.Second, 5*time.Millisecond,
		"server process %d never waited on a lock held by %d", waiter, holder)
}

// spyExecer passes statements to db and counts them.
type spyExecer struct {
	db    *sql.DB
	calls atomic.Int64
}

func (s *spyExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s.calls.Add(1)
	return s.db.ExecContext(ctx, query, args...)
}

func (s *spyExecer) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	s.calls.Add(1)
	return s.db.QueryContext(ctx, query, args...)
}

func (s *spyExecer) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	s.calls.Add(1)
	return s.db.QueryRowContext(ctx, query, args...)
}

func TestOnce(t *testing.T) {
	t.Parallel()

	t.Run("FirstClaimIsTrueAndAClaimAfterItsCommitIsFalse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()

		require.True(t, b.claim(t, consumer, id))

		tx := b.begin(t)
		first, err := b.ib.Once(t.Context(), tx, consumer, id)
		require.NoError(t, err)
		require.False(t, first, "the claim committed before")
		require.NoError(t, tx.Rollback())

		require.Equal(t, 1, b.count(t, "consumer = $1 AND event_id = $2", consumer, id))
	})

	t.Run("SecondClaimInTheSameTransactionIsFalse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		tx := b.begin(t)
		first, err := b.ib.Once(t.Context(), tx, consumer, id)
		require.NoError(t, err)
		require.True(t, first)
		again, err := b.ib.Once(t.Context(), tx, consumer, id)
		require.NoError(t, err)
		require.False(t, again)
		require.NoError(t, tx.Commit())
		require.Equal(t, 1, b.count(t, "true"))
	})

	t.Run("ConsumersAndEventsAreClaimedIndependently", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, other := uuid.New(), uuid.New()
		require.True(t, b.claim(t, consumer, id))
		require.True(t, b.claim(t, "mailer", id), "another consumer of the same event")
		require.True(t, b.claim(t, consumer, other), "another event of the same consumer")
		require.False(t, b.claim(t, "mailer", id))
		require.Equal(t, 3, b.count(t, "true"))
	})

	t.Run("RolledBackClaimLeavesNoRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		tx := b.begin(t)
		first, err := b.ib.Once(t.Context(), tx, consumer, id)
		require.NoError(t, err)
		require.True(t, first)
		require.NoError(t, tx.Rollback())

		require.Equal(t, 0, b.count(t, "true"))
		require.True(t, b.claim(t, consumer, id), "the rolled-back claim never happened")
		require.Equal(t, 1, b.count(t, "true"))
	})

	t.Run("AnyExecer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		// *sql.DB: the claim commits on its own.
		first, err := b.ib.Once(t.Context(), b.db, consumer, id)
		require.NoError(t, err)
		require.True(t, first)
		// *sql.Conn sees it.
		conn, err := b.db.Conn(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		first, err = b.ib.Once(t.Context(), conn, consumer, id)
		require.NoError(t, err)
		require.False(t, first)
	})

	t.Run("LongestConsumerNameIsAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		name := "c" + strings.Repeat("_9", 31) // 63 bytes
		require.Len(t, name, 63)
		require.True(t, b.claim(t, name, uuid.New()))
	})
}

// TestOnceConcurrent is the race of two transactions, on two connections,
// claiming the same (consumer, event) at once: the second waits for the
// first, and gets false if the first committed, true if it rolled back.
func TestOnceConcurrent(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		commit bool // how the first transaction ends
		want   bool // what the second claim then reports
	}{
		{name: "FirstCommitsSecondGetsFalse", commit: true, want: false},
		{name: "FirstRollsBackSecondGetsTrue", commit: false, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := uuid.New()

			first, second := b.begin(t), b.begin(t)
			pid1, pid2 := backendPID(t, first), backendPID(t, second)
			require.NotEqual(t, pid1, pid2, "the transactions share a connection")

			claimed, err := b.ib.Once(t.Context(), first, consumer, id)
			require.NoError(t, err)
			require.True(t, claimed)

			type result struct {
				claimed bool
				err     error
			}
			done := make(chan result, 1)
			exited := make(chan struct{})
			go func() {
				defer close(exited)
				claimed, err := b.ib.Once(t.Context(), second, consumer, id)
				done <- result{claimed, err}
			}()
			// Whatever happens below, end the first transaction so the
			// second claim returns, and join its goroutine; the deferred
			// rollbacks of begin run after this.
			t.Cleanup(func() {
				_ = first.Rollback()
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					t.Error("the second claim did not return within 30 s of the first transaction ending")
				}
			})

			waitBlocked(t, b.db, pid2, pid1)
			select {
			case r := <-done:
				t.Fatalf("the second claim returned (%v, %v) while the first transaction was open", r.claimed, r.err)
			default:
			}

			if tc.commit {
				require.NoError(t, first.Commit())
			} else {
				require.NoError(t, first.Rollback())
			}

			select {
			case r := <-done:
				require.NoError(t, r.err)
				require.Equal(t, tc.want, r.claimed)
			case <-time.After(10 * time.Second):
				t.Fatal("the second claim still waits 10 s after the first transaction ended")
			}
			require.NoError(t, second.Commit())
			require.Equal(t, 1, b.count(t, "consumer = $1 AND event_id = $2", consumer, id))
		})
	}
}

// Claimed tells which events have a committed claim of the consumer,
// without claiming any: not one another consumer claimed, nor one an open
// transaction holds, nor one never claimed.
func TestClaimed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mine, others, open, never := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	require.True(t, b.claim(t, consumer, mine))
	require.True(t, b.claim(t, "shipping", others))
	tx := b.begin(t)
	first, err := b.ib.Once(t.Context(), tx, consumer, open)
	require.NoError(t, err)
	require.True(t, first)

	got, err := b.ib.Claimed(t.Context(), b.db, consumer, []uuid.UUID{mine, others, open, never})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]bool{mine: true}, got)
	require.Equal(t, 0, b.count(t, "event_id = $1", never), "reading claims claims nothing")

	_, err = b.ib.Claimed(t.Context(), b.db, "Billing", []uuid.UUID{mine})
	require.ErrorIs(t, err, inbox.ErrInvalid)
	require.ErrorContains(t, err, "consumer")
}

// Every call that takes a consumer and event ids refuses a bad one,
// naming it, before it reaches the database.
func TestInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, tc := range []struct {
		name     string
		consumer string
		id       uuid.UUID
		field    string // what the error names
	}{
		{name: "EmptyConsumer", consumer: "", id: uuid.New(), field: "consumer"},
		{name: "UpperCaseConsumer", consumer: "Billing", id: uuid.New(), field: "consumer"},
		{name: "QuoteInConsumer", consumer: `a"; drop`, id: uuid.New(), field: "consumer"},
		{name: "ConsumerOf64Bytes", consumer: strings.Repeat("a", 64), id: uuid.New(), field: "consumer"},
		{name: "ConsumerStartsWithDigit", consumer: "1billing", id: uuid.New(), field: "consumer"},
		{name: "NilEventID", consumer: consumer, id: uuid.Nil, field: "event id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spy := &spyExecer{db: b.db}
			claimed, err := b.ib.Once(t.Context(), spy, tc.consumer, tc.id)
			require.ErrorIs(t, err, inbox.ErrInvalid)
			require.ErrorContains(t, err, tc.field)
			require.False(t, claimed)

			ids := []uuid.UUID{uuid.New(), tc.id}
			for what, call := range map[string]func() error{
				"OnceBatch": func() error {
					got, err := b.ib.OnceBatch(t.Context(), spy, tc.consumer, ids)
					require.Empty(t, got)
					return err
				},
				"Claimed": func() error {
					got, err := b.ib.Claimed(t.Context(), spy, tc.consumer, ids)
					require.Empty(t, got)
					return err
				},
				"Release": func() error { return b.ib.Release(t.Context(), spy, tc.consumer, ids) },
			} {
				err := call()
				require.ErrorIs(t, err, inbox.ErrInvalid, what)
				require.ErrorContains(t, err, tc.field, what)
			}
			require.Zero(t, spy.calls.Load(), "an invalid call reached the database")
			require.Equal(t, 0, b.count(t, "true"), "nothing claimed")
		})
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()

	// insertOld commits n claims of consumer, and ages them to 48 hours.
	insertOld := func(t *testing.T, b testBundle, consumer string, n int) {
		t.Helper()
		_, err := b.db.ExecContext(t.Context(), `INSERT INTO "`+b.schema+`".inbox (consumer, event_id, claimed_at)
			SELECT $1, pg_catalog.gen_random_uuid(), now() - interval '48 hours'
			FROM pg_catalog.generate_series(1, $2)`, consumer, n)
		require.NoError(t, err)
	}

	t.Run("DeletesOnlyClaimsOlderThanTheRetentionInBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := 2*inbox.PurgeBatchDefault + 345
		insertOld(t, b, consumer, old)
		// Fresh claims, and claims close to the retention but inside it.
		ids := make([]uuid.UUID, 5)
		for k := range ids {
			ids[k] = uuid.New()
			require.True(t, b.claim(t, consumer, ids[k]))
		}
		_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".inbox
			SET claimed_at = now() - interval '23 hours' WHERE event_id IN ($1, $2)`, ids[3].String(), ids[4].String())
		require.NoError(t, err)
		require.Equal(t, old+5, b.count(t, "true"))

		n, err := b.ib.Purge(t.Context(), b.db, consumer, 24*time.Hour)
		require.NoError(t, err)
		require.Equal(t, int64(old), n)
		require.Equal(t, 5, b.count(t, "true"), "the fresh claims and those inside the retention are kept")

		n, err = b.ib.Purge(t.Context(), b.db, consumer, 24*time.Hour)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 5, b.count(t, "true"))
	})

	t.Run("LeavesOtherConsumersClaims", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertOld(t, b, consumer, 3)
		insertOld(t, b, "other", 4)
		n, err := b.ib.Purge(t.Context(), b.db, consumer, time.Hour)
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		require.Equal(t, 4, b.count(t, "consumer = 'other'"), "another consumer's claims, however old, are its own to purge")
	})

	t.Run("ExactMultipleOfTheBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := 2 * inbox.PurgeBatchDefault
		insertOld(t, b, consumer, old)
		n, err := b.ib.Purge(t.Context(), b.db, consumer, time.Hour)
		require.NoError(t, err)
		require.Equal(t, int64(old), n)
		require.Equal(t, 0, b.count(t, "true"))
	})

	t.Run("SkipsClaimsLockedByAnOpenTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertOld(t, b, consumer, 5)
		var locked uuid.UUID
		tx := b.begin(t)
		require.NoError(t, tx.QueryRowContext(t.Context(), `SELECT event_id FROM "`+b.schema+`".inbox
			LIMIT 1 FOR UPDATE`).Scan(&locked))

		n, err := b.ib.Purge(t.Context(), b.db, consumer, time.Hour)
		require.NoError(t, err)
		require.Equal(t, int64(4), n, "the purge neither waits for nor deletes the locked claim")
		require.Equal(t, 1, b.count(t, "event_id = $1", locked))

		require.NoError(t, tx.Rollback())
		n, err = b.ib.Purge(t.Context(), b.db, consumer, time.Hour)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, 0, b.count(t, "true"))
	})

	t.Run("EmptyInbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		n, err := b.ib.Purge(t.Context(), b.db, consumer, time.Hour)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("NonPositiveAgeIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.ib.Once(t.Context(), b.db, consumer, uuid.New())
		require.NoError(t, err)
		for _, age := range []time.Duration{0, -time.Hour} {
			_, err := b.ib.Purge(t.Context(), b.db, consumer, age)
			require.ErrorIs(t, err, inbox.ErrInvalid)
			require.ErrorContains(t, err, "not positive")
		}
		require.Equal(t, 1, b.count(t, "true"), "nothing purged")
	})
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("RejectsBadSchemaNames", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{
			`a"; drop table x;--`,
			"Upper",
			strings.Repeat("a", 64),
			"a.b",
			"1a",
			"a-b",
		} {
			ib, err := inbox.New(name)
			require.ErrorContains(t, err, "schema", "schema %q", name)
			require.Nil(t, ib, "schema %q", name)
		}
	})

	// The package-level Once and New("") use the schema "tidings". The test
	// creates that schema and its table, if missing, inside a transaction
	// it rolls back, so a server shared with other test binaries (see
	// pgtest.EnvURL) keeps its "tidings" schema as it was. Creating them
	// takes the server's owner, and the claims run in the same
	// transaction: this test alone claims as the owner.
	t.Run("PackageOnceAndEmptyNameUseSchemaTidings", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		tx, err := pgtest.AdminDB(t).BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })

		for _, stmt := range []string{
			`CREATE SCHEMA IF NOT EXISTS ` + tidings.SchemaDefault,
			`SET LOCAL search_path TO ` + tidings.SchemaDefault,
		} {
			_, err := tx.ExecContext(ctx, stmt)
			require.NoError(t, err)
		}
		var exists bool
		require.NoError(t, tx.QueryRowContext(ctx,
			`SELECT pg_catalog.to_regclass('tidings.inbox') IS NOT NULL`).Scan(&exists))
		if !exists {
			ups, err := fs.Glob(inbox.Migrations(), "*.up.sql")
			require.NoError(t, err)
			for _, name := range ups {
				body, err := fs.ReadFile(inbox.Migrations(), name)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, string(body))
				require.NoError(t, err, name)
			}
		}
		// From here on a statement that names no schema finds no table.
		_, err = tx.ExecContext(ctx, `SET LOCAL search_path TO pg_catalog`)
		require.NoError(t, err)

		id := uuid.New()
		first, err := inbox.Once(ctx, tx, consumer, id)
		require.NoError(t, err)
		require.True(t, first)
		var n int
		require.NoError(t, tx.QueryRowContext(ctx,
			`SELECT count(*) FROM tidings.inbox WHERE consumer = $1 AND event_id = $2`, consumer, id).Scan(&n))
		require.Equal(t, 1, n)

		ib, err := inbox.New("")
		require.NoError(t, err)
		again, err := ib.Once(ctx, tx, consumer, id)
		require.NoError(t, err)
		require.False(t, again, `New("") claims in the same table as the package-level Once`)
	})

	t.Run("OnlyTheNamedSchema", func(t *testing.T) {
		t.Parallel()
		b1, b2 := setup(t), setup(t)
		id := uuid.New()
		require.True(t, b1.claim(t, consumer, id))
		require.True(t, b2.claim(t, consumer, id), fmt.Sprintf("schema %s is not %s", b2.schema, b1.schema))
		require.Equal(t, 1, b1.count(t, "true"))
		require.Equal(t, 1, b2.count(t, "true"))
	})
}

// BenchmarkOnce claims one event per transaction through pgx's
// database/sql driver, as the dispatcher does for a request that commits
// alone: begin, claim, roll back. Its allocations are the figure to
// watch; its time is mostly the round trips.
func BenchmarkOnce(b *testing.B) {
	schema := pgtest.Schema(b, inbox.Migrate)
	ib, err := inbox.New(schema)
	require.NoError(b, err)
	db := drivertest.PGX.Open(b, pgtest.URL(b), 1)
	b.ReportAllocs()
	for b.Loop() {
		tx, err := db.BeginTx(b.Context(), nil)
		require.NoError(b, err)
		first, err := ib.Once(b.Context(), tx, consumer, uuid.New())
		require.NoError(b, err)
		require.True(b, first)
		require.NoError(b, tx.Rollback())
	}
}
