package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

const (
	// module is the relay every scenario runs.
	module = "bench"
	// consumer names the dispatcher in the inbox.
	consumer = "bench"
	// channel is the delivery channel of every request.
	channel = "mail"
)

// pending is the predicate of the outbox_due index: a count with it is an
// index-only scan of the rows left, not a scan of the whole table.
const pending = `processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL`

var schemaSeq atomic.Int64

// benchSchema is a fresh migrated schema of one scenario run.
type benchSchema struct {
	name string
	q    string // quoted
	ob   *relay.Outbox
}

// newSchema creates and migrates a fresh schema named after the scenario.
func newSchema(ctx context.Context, db *sql.DB, scenario string) (benchSchema, error) {
	name := fmt.Sprintf("tb_%s_%d_%d", scenario, os.Getpid(), schemaSeq.Add(1))
	if err := tidings.Migrate(ctx, db, name); err != nil {
		return benchSchema{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: name})
	if err != nil {
		return benchSchema{}, err
	}
	return benchSchema{name: name, q: pq.QuoteIdentifier(name), ob: ob}, nil
}

// drop removes the schema, whatever became of ctx.
func (s benchSchema) drop(db *sql.DB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, `DROP SCHEMA `+s.q+` CASCADE`); err != nil {
		progress("drop schema %s: %v", s.name, err)
	}
}

// wakeChannel is the NOTIFY channel staging in the schema signals. It
// mirrors relay's queries (relay/sql.go): the relay does not export it.
func (s benchSchema) wakeChannel() string { return s.name + ".outbox" }

// count returns a count(*) over a query of the schema: %s is the schema.
func (s benchSchema) count(ctx context.Context, db *sql.DB, query string, args ...any) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+fmt.Sprintf(query, s.q), args...).Scan(&n)
	return n, err
}

// openPool opens a pool of the driver of conns connections, all opened
// before use so no timed work pays for a connect.
func openPool(ctx context.Context, drv driver, dsn string, conns int) (*sql.DB, error) {
	db, err := drv.open(dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	held := make([]*sql.Conn, 0, conns)
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("connect: %w", err)
		}
		held = append(held, c)
	}
	return db, nil
}

// request is the i-th request of a run: a mail to a made-up address,
// carrying i so the delivery can tell which one it was handed.
func request(i int) notification.Request {
	return notification.Request{
		Channel:   channel,
		Recipient: fmt.Sprintf("user%d@example.com", i),
		Template:  "welcome",
		Data:      map[string]any{"seq": i, "name": "Ada"},
	}
}

// ruleSubjects is how many subjects the requests of a drain with every
// rule are about.
const ruleSubjects = 1000

// ruleRequest is req with the recipient rules of rs on: a subject with
// preferences and quiet hours (stageRules), a declared category and an
// expiry, and for rulesAll a dedup key of its own and a secret.
func ruleRequest(req notification.Request, i int, rs ruleSet) notification.Request {
	req.Subject = fmt.Sprintf("subject-%d", i%ruleSubjects)
	req.Category = "welcome"
	req.ExpiresAt = time.Now().Add(24 * time.Hour)
	if rs == rulesAll {
		req.DedupKey = fmt.Sprintf("welcome-%d", i)
		req.Secrets = map[string]string{"token": fmt.Sprintf("t%d", i)}
	}
	return req
}

// stageRules gives every subject of ruleRequest three preferences (one of
// its requests' category and channel, which turns them on and decides;
// one of another category and one of another channel, which cannot apply)
// and a quiet window that is not open now, so that every rule is read and
// decided and every request still goes out.
func stageRules(ctx context.Context, db *sql.DB, s benchSchema) error {
	later := time.Now().UTC().Add(6 * time.Hour)
	windows := fmt.Sprintf(`[{"start": "%02d:00", "end": "%02d:30"}]`, later.Hour(), later.Hour())
	if _, err := db.ExecContext(ctx, `INSERT INTO `+s.q+`.preference (subject, category, channel, enabled)
			SELECT 'subject-' || i, 'welcome', $2, true FROM generate_series(0, $1 - 1) i
			UNION ALL SELECT 'subject-' || i, 'marketing', '', false FROM generate_series(0, $1 - 1) i
			UNION ALL SELECT 'subject-' || i, '', 'sms', false FROM generate_series(0, $1 - 1) i`, ruleSubjects, channel); err != nil {
		return fmt.Errorf("stage the preferences: %w", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+s.q+`.quiet_hours (subject, time_zone, windows)
			SELECT 'subject-' || i, 'UTC', $2::jsonb FROM generate_series(0, $1 - 1) i`, ruleSubjects, windows); err != nil {
		return fmt.Errorf("stage the quiet hours: %w", err)
	}
	return nil
}

// seqOf reads back the index request(i) put into the data.
func seqOf(data map[string]any) (int, bool) {
	f, ok := data["seq"].(float64)
	return int(f), ok
}

// stageBacklog commits n requests into the schema's outbox without waking
// anyone, chunk requests per statement, from two writers; it returns their
// ids by index.
func stageBacklog(ctx context.Context, db *sql.DB, s benchSchema, n, chunk int, rules ruleSet) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, n)
	quiet := s.ob.WithoutWakeUp()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	started := time.Now()
	var done atomic.Int64
	for range 2 {
		wg.Go(func() {
			msgs := make([]relay.Message, 0, chunk)
			for {
				start := int(next.Add(int64(chunk))) - chunk
				if start >= n || ctx.Err() != nil {
					return
				}
				end := min(start+chunk, n)
				msgs = msgs[:0]
				for i := start; i < end; i++ {
					req := request(i)
					if rules != rulesOff {
						req = ruleRequest(req, i, rules)
					}
					m, err := req.Message(module)
					if err != nil {
						errs <- err
						return
					}
					msgs = append(msgs, m)
				}
				got, err := quiet.StageBatch(ctx, db, msgs)
				if err != nil {
					errs <- err
					return
				}
				copy(ids[start:end], got)
				if d := done.Add(int64(end - start)); d/100_000 != (d-int64(end-start))/100_000 {
					progress("  staged %d of %d (%.0f/s)", d, n, float64(d)/time.Since(started).Seconds())
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(<-errs, ctx.Err()); err != nil {
		return nil, fmt.Errorf("stage %d requests: %w", n, err)
	}
	return ids, nil
}

// prepareDrain settles the tables after a bulk load (the backlog, and the
// subjects' preferences and quiet hours of stageRules), as autovacuum would
// have by the time a real backlog is drained, and starts from a fresh
// checkpoint, so every run of a drain begins in the same state.
func prepareDrain(ctx context.Context, db *sql.DB, s benchSchema) error {
	var stmts []string
	for _, table := range []string{"outbox", "inbox", "preference", "quiet_hours"} {
		stmts = append(stmts, `VACUUM (ANALYZE) `+s.q+`.`+table)
	}
	for _, q := range append(stmts, `CHECKPOINT`) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// fillHistory gives s n processed requests of another module, each with
// an inbox claim of another consumer, then vacuums and analyzes both
// tables. A relay in operation works on an outbox and an inbox that keep
// the requests of their retention, vacuumed and analyzed. On empty tables
// the server planned the settle once, for a table of no rows, and kept
// that plan, which reads the whole table, until autovacuum first analyzed
// it: a minute or more, longer than a steady run, so the settle's cost
// grew with every request the run staged (docs/bench/HISTORY.md).
func fillHistory(ctx context.Context, db *sql.DB, s benchSchema, n int) error {
	msg, err := request(0).Message(module)
	if err != nil {
		return err
	}
	fill := []struct {
		query string
		args  []any
	}{
		{`INSERT INTO %[1]s.outbox (id, module, kind, payload, lane, created_at, available_at, processed_at, hands, answered_hand)
			SELECT gen_random_uuid(), 'history', $1, $2::jsonb, $3, t, t, t, 1, 1
			FROM generate_series(1, $4::int) g, LATERAL (SELECT now() - make_interval(secs => $4::int - g) AS t) at`,
			[]any{msg.Kind, string(msg.Payload), channel, n}},
		{`INSERT INTO %[1]s.inbox (consumer, event_id) SELECT 'history', id FROM %[1]s.outbox WHERE module = 'history'`, nil},
		{`VACUUM (ANALYZE) %[1]s.outbox`, nil},
		{`VACUUM (ANALYZE) %[1]s.inbox`, nil},
	}
	for _, f := range fill {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(f.query, s.q), f.args...); err != nil {
			return fmt.Errorf("fill the history: %w", err)
		}
	}
	return nil
}

// waitSettled polls until no request of the schema is pending, failing
// after the deadline.
func waitSettled(ctx context.Context, db *sql.DB, s benchSchema, deadline time.Duration, every time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	for {
		n, err := s.count(ctx, db, `%s.outbox WHERE `+pending)
		if err != nil {
			return fmt.Errorf("wait for the drain (%d pending at the last look): %w", n, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain unfinished after %s: %d requests pending", deadline, n)
		case <-time.After(every):
		}
	}
}

// settleSpan returns the first and last settle times (database clock) of
// the schema's processed rows.
func settleSpan(ctx context.Context, db *sql.DB, s benchSchema) (first, last time.Time, err error) {
	err = db.QueryRowContext(ctx, `SELECT min(processed_at), max(processed_at) FROM `+s.q+`.outbox WHERE module = $1`, module).Scan(&first, &last)
	return first, last, err
}

// verifyDrain checks, in the database, that n requests were processed,
// none is dead or pending, and each holds exactly one inbox claim.
func verifyDrain(ctx context.Context, db *sql.DB, s benchSchema, n int) error {
	var processed, dead, left, claims, joined int
	err := db.QueryRowContext(ctx, `SELECT
			count(*) FILTER (WHERE processed_at IS NOT NULL),
			count(*) FILTER (WHERE failed_at IS NOT NULL),
			count(*) FILTER (WHERE `+pending+`),
			(SELECT count(*) FROM `+s.q+`.inbox WHERE consumer = $1),
			(SELECT count(*) FROM `+s.q+`.inbox i JOIN `+s.q+`.outbox o ON o.id = i.event_id WHERE i.consumer = $1)
		FROM `+s.q+`.outbox WHERE module = $2`, consumer, module).Scan(&processed, &dead, &left, &claims, &joined)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if processed != n || dead != 0 || left != 0 || claims != n || joined != n {
		return fmt.Errorf("verify: want %d processed, 0 dead, 0 pending, %d inbox claims of staged requests; have %d processed, %d dead, %d pending, %d claims, %d of staged requests",
			n, n, processed, dead, left, claims, joined)
	}
	return nil
}

// runningRelay is a relay running in the background.
type runningRelay struct {
	cancel context.CancelFunc
	exited chan struct{} // closed when Supervise returned
	err    error         // Supervise's, once exited is closed
}

// supervise runs a relay in the background until stop.
func supervise(db *sql.DB, cfg relay.Config, sink relay.Sink) *runningRelay {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningRelay{cancel: cancel, exited: make(chan struct{})}
	go func() {
		r.err = relay.Supervise(ctx, db, &cfg, sink)
		close(r.exited)
	}()
	return r
}

// stop ends the relay and returns Supervise's error.
func (r *runningRelay) stop() error {
	r.cancel()
	select {
	case <-r.exited:
		return r.err
	case <-time.After(time.Minute):
		return errors.New("the relay did not stop within a minute")
	}
}
