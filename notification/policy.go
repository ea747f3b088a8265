package notification

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/migrate"
	"github.com/tidings-go/tidings/internal/validate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the SQL migrations of the recipient rules' tables
// (preferences, quiet hours, dedup keys, suppressed addresses and the
// transient failures that lead to them), named as golang-migrate
// expects. tidings.Migrate applies them with the outbox and the inbox.
func Migrations() fs.FS { return migrate.Dir(migrationFiles) }

// Category declares a category that requests may name (Request.Category)
// in Config.Categories: whether it is critical, and what a subject gets
// on each channel when no preference of theirs says otherwise.
type Category struct {
	// Critical requests of this category bypass preferences and quiet
	// hours, as security mail does (a password changed, a verification
	// code). They never bypass the suppression of an address.
	Critical bool

	// Defaults maps a channel to whether a subject gets this category on
	// it when no preference row applies; the key "" stands for every
	// channel not listed. A channel neither lists is on. An opt-in
	// category: {"": false}.
	Defaults map[string]bool
}

// Preference is a subject's wish about one category on one channel. An
// empty Category or Channel stands for every one.
//
// The preference that applies to a request is the most specific row of
// its subject: category and channel; then category alone or channel
// alone, and when both exist and disagree, off; then the subject's row
// for everything; then the category's Defaults (see Category). So a
// subject who turned everything off gets nothing but critical requests,
// and one who then turned mail on for bookings gets booking mail:
//
//	rows of the subject                 request       sent?
//	(none)                              booking/push  Defaults, else yes
//	*/* off                             booking/push  no
//	*/* off, booking/mail on            booking/mail  yes
//	booking/* off                       booking/mail  no
//	booking/* off, booking/mail on      booking/mail  yes
//	*/push off                          booking/push  no
//	*/push off, booking/* on            booking/push  no (equally specific: off wins)
//	*/push off, booking/push on         booking/push  yes
type Preference struct {
	Category string
	Channel  string
	Enabled  bool

	// UpdatedAt is when the row was last written (read only).
	UpdatedAt time.Time
}

// TimeOfDay is a wall-clock time in a subject's time zone, in seconds
// after midnight (0 to 86399).
type TimeOfDay int

// At returns the time of day hour:minute.
func At(hour, minute int) TimeOfDay { return TimeOfDay(hour*3600 + minute*60) }

// TimeOfDayOf returns the wall-clock time of t, to the second.
func TimeOfDayOf(t time.Time) TimeOfDay {
	return TimeOfDay(t.Hour()*3600 + t.Minute()*60 + t.Second())
}

// String writes t as "15:04", or "15:04:05" when it has seconds.
func (t TimeOfDay) String() string {
	if t%60 != 0 {
		return fmt.Sprintf("%02d:%02d:%02d", int(t)/3600, int(t)/60%60, int(t)%60)
	}
	return fmt.Sprintf("%02d:%02d", int(t)/3600, int(t)/60%60)
}

// MarshalText writes t as String does.
func (t TimeOfDay) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads "15:04" or "15:04:05".
func (t *TimeOfDay) UnmarshalText(b []byte) error {
	parts := strings.Split(string(b), ":")
	var v [3]int
	ok := len(parts) == 2 || len(parts) == 3
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		ok = ok && i < 3 && err == nil && n >= 0 && n < [3]int{24, 60, 60}[min(i, 2)]
		if ok {
			v[i] = n
		}
	}
	if !ok {
		return fmt.Errorf("notification: time of day %q is not hh:mm or hh:mm:ss", b)
	}
	*t = TimeOfDay(v[0]*3600 + v[1]*60 + v[2])
	return nil
}

// QuietWindow is a span of a subject's day in which non-critical requests
// wait: a request that comes due inside it is deferred to its end.
type QuietWindow struct {
	// Days are the weekdays the window starts on; empty means every day.
	Days []time.Weekday `json:"days,omitempty"`
	// Start and End bound the window, in the subject's zone. An End before
	// Start crosses midnight: 22:00 to 07:00 ends the next morning. An
	// End the clocks skip on the night they go forward is the moment they
	// jump (02:30 in New York on that night ends the window at 03:00); an
	// End the clocks show twice on the night they go back is the next of
	// the two (a request at 01:10 the second time round waits until the
	// second 01:30).
	Start TimeOfDay `json:"start"`
	End   TimeOfDay `json:"end"`
	// Channels the window holds back; empty means every channel.
	Channels []string `json:"channels,omitempty"`
}

// QuietHours are a subject's time zone and quiet windows.
type QuietHours struct {
	// TimeZone is an IANA zone, such as "Europe/Berlin" (or "UTC"), not
	// "Local", which would be each relay machine's own. The relay's
	// machine needs the zone database (or the program imports
	// time/tzdata).
	TimeZone string
	Windows  []QuietWindow
}

// validate checks q, naming the field, and returns its zone.
func (q QuietHours) validate() (*time.Location, error) {
	loc, err := time.LoadLocation(q.TimeZone)
	if err != nil || q.TimeZone == "" || q.TimeZone == "Local" {
		return nil, fmt.Errorf("%w: QuietHours.TimeZone %q is not an IANA time zone", ErrInvalidRequest, q.TimeZone)
	}
	for i, w := range q.Windows {
		field := fmt.Sprintf("QuietHours.Windows[%d]", i)
		switch {
		case w.Start < 0 || w.Start >= At(24, 0) || w.End < 0 || w.End >= At(24, 0):
			return nil, fmt.Errorf("%w: %s: Start and End must be times of day, 00:00:00 to 23:59:59", ErrInvalidRequest, field)
		case w.Start == w.End:
			return nil, fmt.Errorf("%w: %s: Start and End are both %s: the window is empty", ErrInvalidRequest, field, w.Start)
		}
		for _, d := range w.Days {
			if d < time.Sunday || d > time.Saturday {
				return nil, fmt.Errorf("%w: %s: Days holds %d, not a weekday", ErrInvalidRequest, field, d)
			}
		}
		for _, ch := range w.Channels {
			if err := ident.Check(field+".Channels", ch); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
			}
		}
	}
	return loc, nil
}

// rulesRead reads the recipient rules of requests, alone (for a batch) or
// after a transaction's inbox claims (claimOne, claimBatch): the quiet
// hours (q) of their
// subjects ($1), the preferences (p) that can apply to them (those of
// each subject $2 in its category $3 or every category, on its channel
// $4 or every channel), the suppressions (s) of their channels ($5) and
// addresses ($6), and the database's clock (n), whether there are rows;
// its statement's, not its transaction's. Each subject and address is a
// probe of its table's primary key (preference's covers the row: an
// index-only scan): OFFSET 0 keeps the planner from turning the look-ups
// into one join, which a plan made once for a prepared statement (pgx
// prepares each) does as a scan of the whole table when the table is
// small, the batch's size unknown to it. The arrays come through
// sub-selects, so that no plan knows their lengths and one made for one
// batch costs what one made for any: the server then keeps a prepared
// statement's plan instead of planning the statement again for every
// batch. A preference's category and channel are each two equalities
// ORed, not an IN list, whose array the server would build for every
// entry of the index it reads (a tenth of the look-up's time).
const rulesRead = `SELECT 'q', q.* FROM unnest((SELECT $1::text[])) AS k(subject) CROSS JOIN LATERAL (
				SELECT subject, NULL, NULL, NULL::boolean, NULL::timestamptz, time_zone, windows FROM {quiet}
				WHERE subject = k.subject OFFSET 0) q
			UNION ALL
			SELECT 'p', p.* FROM unnest((SELECT $2::text[]), (SELECT $3::text[]), (SELECT $4::text[])) AS k(subject, category, channel)
			CROSS JOIN LATERAL (
				SELECT subject, category, channel, enabled, updated_at, NULL, NULL::jsonb FROM {preference}
				WHERE subject = k.subject AND (category = k.category OR category = '') AND (channel = k.channel OR channel = '') OFFSET 0) p
			UNION ALL
			SELECT 's', s.* FROM unnest((SELECT $5::text[]), (SELECT $6::text[])) AS k(channel, address) CROSS JOIN LATERAL (
				SELECT address, scope, channel, NULL::boolean, created_at, reason,
					jsonb_build_object('class', class, 'provider', provider, 'source', source) FROM {suppression}
				WHERE channel = k.channel AND address = k.address OFFSET 0) s
			UNION ALL
			SELECT 'n', '', NULL, NULL, NULL, statement_timestamp(), NULL, NULL`

// claimOne claims the request {id} for consumer {consumer} and, if that
// is its first claim, its dedup key {key} unless {key} is empty: one
// statement for a request that commits alone. Its key is taken after its
// claim, in the order of claimKeys after claimBatch, so two transactions
// that want both wait for each other in one order. It gives a row 'c' if
// it claimed the request for the first time (another open transaction's
// claim is waited for) and 'k' if it took the key, in rulesRead's
// columns.
const claimOne = `WITH c AS (
				INSERT INTO {inbox} (consumer, event_id) VALUES ({consumer}, {id})
				ON CONFLICT (consumer, event_id) DO NOTHING
				RETURNING event_id),
			k AS (
				INSERT INTO {dedup} (consumer, key, event_id) SELECT {consumer}, {key}, event_id FROM c WHERE {key} <> ''
				ON CONFLICT (consumer, key) DO NOTHING
				RETURNING key)
			SELECT 'c', event_id::text, NULL, NULL, NULL::boolean, NULL::timestamptz, NULL, NULL::jsonb FROM c
			UNION ALL
			SELECT 'k', key, NULL, NULL, NULL, NULL, NULL, NULL FROM k`

// claimBatch claims the requests {id} (an array) for consumer {consumer},
// in id order, so two transactions claiming overlapping sets wait for
// each other instead of deadlocking, and gives a row 'c' for each it
// claimed for the first time, as claimOne does.
const claimBatch = `WITH c AS (
				INSERT INTO {inbox} (consumer, event_id)
				SELECT {consumer}, id FROM unnest({id}::uuid[]) AS ids(id) ORDER BY id
				ON CONFLICT (consumer, event_id) DO NOTHING
				RETURNING event_id)
			SELECT 'c', event_id::text, NULL, NULL, NULL::boolean, NULL::timestamptz, NULL, NULL::jsonb FROM c`

// claimAlone claims the request {id} for consumer {consumer}, and gives
// a row 'c' if that is its first claim, as claimOne does: one statement
// for a request with no dedup key whose rules were read before.
const claimAlone = `INSERT INTO {inbox} (consumer, event_id) VALUES ({consumer}, {id})
			ON CONFLICT (consumer, event_id) DO NOTHING
			RETURNING 'c', event_id::text, NULL, NULL, NULL::boolean, NULL::timestamptz, NULL, NULL::jsonb`

// policyQueries are the statements of the recipient rules for one schema.
type policyQueries struct {
	setPreference, deletePreference, preferences string
	setQuiet, deleteQuiet, quiet                 string
	// The rules of a batch's requests (rulesRead); a transaction's inbox
	// claims: a lone request's (with its dedup key, or without one) and a
	// batch's, without the rules and with them after.
	rules                                                            string
	claimAlone, claimOne, claimBatch, claimOneRules, claimBatchRules string
	// The dedup keys of one claim's transaction.
	claimKeys, keyReference, readKeys, releaseKeys, purgeKeys string
	// Suppressed addresses, and the transient failures that lead to one.
	suppress, lift, liftUnsubscribed, suppressions string
	countTransient, clearTransient, purgeTransient string
	// The pending requests of a module and channel that may go to an
	// address.
	pendingTo string
}

func newPolicyQueries(schema string) policyQueries {
	s := ident.Quote(schema)
	r := strings.NewReplacer("{preference}", s+".preference", "{quiet}", s+".quiet_hours", "{dedup}", s+".dedup",
		"{outbox}", s+".outbox", "{inbox}", s+".inbox", "{suppression}", s+".suppression", "{transient}", s+".transient_failure")
	// The claims' parameters come first alone, after rulesRead's with it.
	alone := strings.NewReplacer("{consumer}", "$1", "{id}", "$2", "{key}", "$3")
	withRules := strings.NewReplacer("{consumer}", "$7", "{id}", "$8", "{key}", "$9")
	return policyQueries{
		setPreference: r.Replace(`INSERT INTO {preference} (subject, category, channel, enabled) VALUES ($1, $2, $3, $4)
			ON CONFLICT (subject, category, channel) DO UPDATE SET enabled = excluded.enabled, updated_at = now()`),
		deletePreference: r.Replace(`DELETE FROM {preference} WHERE subject = $1 AND category = $2 AND channel = $3`),
		preferences: r.Replace(`SELECT category, channel, enabled, updated_at FROM {preference}
			WHERE subject = $1 ORDER BY category, channel`),
		setQuiet: r.Replace(`INSERT INTO {quiet} (subject, time_zone, windows) VALUES ($1, $2, $3)
			ON CONFLICT (subject) DO UPDATE SET time_zone = excluded.time_zone, windows = excluded.windows, updated_at = now()`),
		deleteQuiet: r.Replace(`DELETE FROM {quiet} WHERE subject = $1`),
		quiet:       r.Replace(`SELECT time_zone, windows FROM {quiet} WHERE subject = $1`),

		// A transaction's inbox claims, with the recipient rules of its
		// requests or without: the dispatcher reads the rules in the
		// statement that claims the requests when one transaction holds
		// its whole batch (a round trip less between the hand and the
		// delivery), and else once for the batch, before: read with the
		// claim of each request of a channel that commits each, the rules
		// took a quarter of the rate of its drain (docs/bench/HISTORY.md).
		rules:           r.Replace(rulesRead),
		claimAlone:      r.Replace(alone.Replace(claimAlone)),
		claimOne:        r.Replace(alone.Replace(claimOne)),
		claimBatch:      r.Replace(alone.Replace(claimBatch)),
		claimOneRules:   r.Replace(withRules.Replace(claimOne) + "\n\t\t\tUNION ALL\n\t\t\t" + rulesRead),
		claimBatchRules: r.Replace(withRules.Replace(claimBatch) + "\n\t\t\tUNION ALL\n\t\t\t" + rulesRead),

		// Keys in order, so two transactions claiming overlapping keys
		// wait for each other instead of deadlocking. A key another open
		// transaction holds makes this wait for its end. The order is the
		// bytes', as the table's: the parameter's would be the database's
		// collation.
		claimKeys: r.Replace(`INSERT INTO {dedup} (consumer, key, event_id)
			SELECT $1, key, event_id FROM unnest($2::text[], $3::uuid[]) AS k(key, event_id) ORDER BY key COLLATE "C"
			ON CONFLICT (consumer, key) DO NOTHING
			RETURNING key`),
		// The reference of a delivered request that holds key $2, in the
		// transaction that commits its claim.
		keyReference: r.Replace(`UPDATE {dedup} SET reference = $3 WHERE consumer = $1 AND key = $2`),
		// The first request's reference: written with its key, or else
		// its row's result (a shared commit writes it in the
		// transaction that commits the key).
		readKeys: r.Replace(`SELECT d.key, d.event_id, coalesce(nullif(d.reference, ''), o.result, '')
			FROM {dedup} d LEFT JOIN {outbox} o ON o.id = d.event_id
			WHERE d.consumer = $1 AND d.key = ANY($2::text[])`),
		releaseKeys: r.Replace(`DELETE FROM {dedup} WHERE consumer = $1 AND key = ANY($2::text[])`),
		// An address suppressed already stays as it is: the first reason
		// stands until the suppression is lifted.
		suppress: r.Replace(`INSERT INTO {suppression} (channel, address, scope, class, reason, provider, source)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (channel, address, scope) DO NOTHING`),
		lift:             r.Replace(`DELETE FROM {suppression} WHERE channel = $1 AND address = $2 AND scope = $3`),
		liftUnsubscribed: r.Replace(`DELETE FROM {suppression} WHERE channel = $1 AND address = $2 AND class = 'unsubscribe'`),
		suppressions: r.Replace(`SELECT channel, address, scope, class, reason, provider, source, created_at FROM {suppression}
			WHERE ($1 = '' OR channel = $1) AND ($2 = '' OR address = $2) AND (channel, address, scope) > ($3, $4, $5)
			ORDER BY channel, address, scope
			LIMIT $6`),
		// The failures of the window ($3 seconds) and this one, of the
		// message $4, unless a failure of the window was of that message
		// ('' is of none): a message delayed at each retry counts once.
		// The row lock of the upsert makes two reports of one address take
		// turns, so neither misses the other's failure.
		countTransient: r.Replace(`INSERT INTO {transient} AS t (channel, address, failed_at, message_id)
				VALUES ($1, $2, ARRAY[now()], ARRAY[$4::text])
			ON CONFLICT (channel, address) DO UPDATE SET updated_at = now(), (failed_at, message_id) = (
				WITH w AS (
					SELECT f, coalesce(m, '') AS m FROM unnest(t.failed_at, t.message_id) AS u(f, m)
					WHERE f > now() - make_interval(secs => $3))
				SELECT array_agg(f ORDER BY f), array_agg(m ORDER BY f) FROM (
					SELECT f, m FROM w
					UNION ALL
					SELECT now(), $4::text WHERE $4 = '' OR $4 <> ALL(ARRAY(SELECT m FROM w))) kept)
			RETURNING cardinality(failed_at)`),
		clearTransient: r.Replace(`DELETE FROM {transient} WHERE channel = $1 AND address = $2`),
		purgeTransient: r.Replace(`DELETE FROM {transient} t USING (
				SELECT channel, address FROM {transient} WHERE updated_at < now() - make_interval(secs => $1)
				LIMIT $2 FOR UPDATE SKIP LOCKED) old
			WHERE t.channel = old.channel AND t.address = old.address`),
		// Through outbox_due: the pending requests of module $1 and
		// channel $2 whose recipient, lower-cased, holds $4 (the address,
		// lower-cased): a superset of those to the address, which the
		// caller narrows by normalising each recipient.
		pendingTo: r.Replace(`SELECT id, payload->>'recipient' FROM {outbox}
			WHERE module = $1 AND lane = $2 AND processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
				AND kind = $3 AND strpos(lower(payload->>'recipient'), $4) > 0`),
		purgeKeys: r.Replace(`DELETE FROM {dedup} d USING (
				SELECT consumer, key FROM {dedup} WHERE consumer = $3 AND claimed_at < now() - make_interval(secs => $1)
				LIMIT $2 FOR UPDATE SKIP LOCKED) old
			WHERE d.consumer = old.consumer AND d.key = old.key`),
	}
}

// checkSubject checks a subject given to a preference or quiet-hours call.
func checkSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("%w: subject is empty", ErrInvalidRequest)
	}
	if err := validate.Printable("subject", subject, SubjectMaxLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

// checkTx checks the caller's transaction.
func checkTx(tx dbtx.Execer) error {
	if err := validate.NotNil("tx", tx); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

// checkScope checks a preference's category and channel: each empty (for
// every one) or a lower-case identifier.
func checkScope(category, channel string) error {
	for field, v := range map[string]string{"Category": category, "Channel": channel} {
		if v == "" {
			continue
		}
		if err := ident.Check(field, v); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	return nil
}

// SetPreference writes subject's preference p inside tx, the caller's own
// transaction: a settings form commits it with the rest of the user's
// settings, and a request staged in the same transaction is decided by
// it. It replaces the row of the same category and channel.
func (c *Client) SetPreference(ctx context.Context, tx dbtx.Execer, subject string, p Preference) error {
	if err := errors.Join(checkSubject(subject), checkScope(p.Category, p.Channel), checkTx(tx)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, c.policy.setPreference, subject, p.Category, p.Channel, p.Enabled); err != nil {
		return fmt.Errorf("notification: set preference: %w", err)
	}
	return nil
}

// DeletePreference removes subject's preference for category and channel
// inside tx; the next more general one applies again.
func (c *Client) DeletePreference(ctx context.Context, tx dbtx.Execer, subject, category, channel string) error {
	if err := errors.Join(checkSubject(subject), checkScope(category, channel), checkTx(tx)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, c.policy.deletePreference, subject, category, channel); err != nil {
		return fmt.Errorf("notification: delete preference: %w", err)
	}
	return nil
}

// Preferences returns subject's preferences, by category and channel (in
// the order of their bytes, whatever the database's collation).
func (c *Client) Preferences(ctx context.Context, subject string) ([]Preference, error) {
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	rows, err := c.db.QueryContext(ctx, c.policy.preferences, subject)
	if err != nil {
		return nil, fmt.Errorf("notification: preferences: %w", err)
	}
	defer rows.Close()
	var out []Preference
	for rows.Next() {
		var p Preference
		if err := rows.Scan(&p.Category, &p.Channel, &p.Enabled, &p.UpdatedAt); err != nil {
			return nil, fmt.Errorf("notification: preferences: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("notification: preferences: %w", err)
	}
	return out, nil
}

// SetQuietHours writes subject's time zone and quiet windows inside tx,
// replacing any earlier ones; with no windows it removes them.
func (c *Client) SetQuietHours(ctx context.Context, tx dbtx.Execer, subject string, q QuietHours) error {
	if err := errors.Join(checkSubject(subject), checkTx(tx)); err != nil {
		return err
	}
	if len(q.Windows) == 0 {
		if _, err := tx.ExecContext(ctx, c.policy.deleteQuiet, subject); err != nil {
			return fmt.Errorf("notification: set quiet hours: %w", err)
		}
		return nil
	}
	if _, err := q.validate(); err != nil {
		return err
	}
	windows, err := json.Marshal(q.Windows)
	if err != nil {
		return fmt.Errorf("notification: set quiet hours: %w", err)
	}
	if _, err := tx.ExecContext(ctx, c.policy.setQuiet, subject, q.TimeZone, windows); err != nil {
		return fmt.Errorf("notification: set quiet hours: %w", err)
	}
	return nil
}

// QuietHoursOf returns subject's quiet hours; none is the zero QuietHours.
func (c *Client) QuietHoursOf(ctx context.Context, subject string) (QuietHours, error) {
	if err := checkSubject(subject); err != nil {
		return QuietHours{}, err
	}
	var q QuietHours
	var windows []byte
	err := c.db.QueryRowContext(ctx, c.policy.quiet, subject).Scan(&q.TimeZone, &windows)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return QuietHours{}, nil
	case err != nil:
		return QuietHours{}, fmt.Errorf("notification: quiet hours: %w", err)
	}
	if err := json.Unmarshal(windows, &q.Windows); err != nil {
		return QuietHours{}, fmt.Errorf("notification: quiet hours: %w", err)
	}
	return q, nil
}

// preferenceOf decides whether a request of category on channel goes out
// by the rows of its subject; detail says what decided it, for the
// timeline of a request it stops (nil when nothing did).
func preferenceOf(rows []Preference, cat Category, category, channel string) (enabled bool, detail func() map[string]any) {
	row := func(p Preference, level string) func() map[string]any {
		return func() map[string]any {
			return map[string]any{"rule": "preference", "level": level, "category": p.Category, "channel": p.Channel,
				"enabled": p.Enabled, "updated_at": p.UpdatedAt}
		}
	}
	byDefault := func(channel string, on bool) func() map[string]any {
		return func() map[string]any {
			return map[string]any{"rule": "category_default", "category": category, "channel": channel, "enabled": on}
		}
	}
	find := func(category, channel string) (Preference, bool) {
		i := slices.IndexFunc(rows, func(p Preference) bool { return p.Category == category && p.Channel == channel })
		if i < 0 {
			return Preference{}, false
		}
		return rows[i], true
	}
	if category != "" {
		if p, ok := find(category, channel); ok {
			return p.Enabled, row(p, "category and channel")
		}
	}
	var mid []Preference
	if category != "" {
		if p, ok := find(category, ""); ok {
			mid = append(mid, p)
		}
	}
	if p, ok := find("", channel); ok {
		mid = append(mid, p)
	}
	if len(mid) > 0 {
		for _, p := range mid {
			if !p.Enabled {
				return false, row(p, "category or channel")
			}
		}
		return true, row(mid[0], "category or channel")
	}
	if p, ok := find("", ""); ok {
		return p.Enabled, row(p, "everything")
	}
	if on, ok := cat.Defaults[channel]; ok {
		return on, byDefault(channel, on)
	}
	if on, ok := cat.Defaults[""]; ok {
		return on, byDefault("", on)
	}
	return true, nil
}

// quietUntil returns when the quiet windows of q that hold back channel,
// and that t falls in, end (windows that follow one another count as
// one), and the window that ends last; the zero time when t is in none.
func quietUntil(q QuietHours, loc *time.Location, t time.Time, channel string) (time.Time, QuietWindow) {
	var until time.Time
	var last QuietWindow
	cur := t
	for range 8 { // windows end within a day; chains longer than a week are not followed
		moved := false
		for _, w := range q.Windows {
			if len(w.Channels) > 0 && !slices.Contains(w.Channels, channel) {
				continue
			}
			if end, in := w.endIfIn(cur.In(loc)); in && end.After(cur) {
				cur, last, moved = end, w, true
			}
		}
		if !moved {
			break
		}
		until = cur
	}
	return until, last
}

// endIfIn reports whether the local time t falls in w, and when that
// occurrence of w ends.
func (w QuietWindow) endIfIn(t time.Time) (time.Time, bool) {
	on := func(d time.Weekday) bool { return len(w.Days) == 0 || slices.Contains(w.Days, d) }
	tod := TimeOfDayOf(t)
	at := func(day time.Time, tod TimeOfDay) time.Time { return wallClock(day, tod, t) }
	switch {
	case w.Start < w.End:
		if on(t.Weekday()) && tod >= w.Start && tod < w.End {
			return at(t, w.End), true
		}
	case tod >= w.Start && on(t.Weekday()): // crosses midnight: the evening part
		return at(t.AddDate(0, 0, 1), w.End), true
	case tod < w.End && on(t.AddDate(0, 0, -1).Weekday()): // the morning part
		return at(t, w.End), true
	}
	return time.Time{}, false
}

// wallClock returns when the clock of day's zone shows tod on day's date:
// the moment the clocks jump past it when they skip it, and of the two
// moments they show it when they go back, the first after t (the last if
// neither is). time.Date leaves both cases to the zone's direction (a
// skipped time moves back west of UTC).
func wallClock(day time.Time, tod TimeOfDay, t time.Time) time.Time {
	y, m, d := day.Date()
	h, mi, s := int(tod)/3600, int(tod)/60%60, int(tod)%60
	loc := day.Location()
	guess := time.Date(y, m, d, h, mi, s, 0, loc)
	wall := time.Date(y, m, d, h, mi, s, 0, time.UTC)
	// The wall time read with each offset in effect that day: a valid one
	// shows the wall time back.
	var shown, skipped []time.Time
	seen := map[int]bool{}
	for _, probe := range []time.Time{guess.Add(-12 * time.Hour), guess, guess.Add(12 * time.Hour)} {
		_, off := probe.Zone()
		if seen[off] {
			continue
		}
		seen[off] = true
		c := wall.Add(-time.Duration(off) * time.Second).In(loc)
		if cy, cm, cd := c.Date(); cy == y && cm == m && cd == d && c.Hour() == h && c.Minute() == mi && c.Second() == s {
			shown = append(shown, c)
		} else {
			skipped = append(skipped, c)
		}
	}
	slices.SortFunc(shown, time.Time.Compare)
	switch {
	case len(shown) == 0 && len(skipped) > 0: // in the gap: when the zone before it ends
		first := slices.MinFunc(skipped, time.Time.Compare)
		if _, end := first.ZoneBounds(); !end.IsZero() {
			return end
		}
		return guess
	case len(shown) == 0:
		return guess
	}
	for _, c := range shown {
		if c.After(t) {
			return c
		}
	}
	return shown[len(shown)-1]
}

// describe writes w for a timeline, such as "22:00-07:00 Mon,Tue (sms)".
func (w QuietWindow) describe() string {
	s := w.Start.String() + "-" + w.End.String()
	if len(w.Days) > 0 {
		days := make([]string, len(w.Days))
		for i, d := range w.Days {
			days[i] = d.String()[:3]
		}
		s += " " + strings.Join(days, ",")
	}
	if len(w.Channels) > 0 {
		s += " (" + strings.Join(w.Channels, ",") + ")"
	}
	return s
}
