// Package notificationtest lets application code that stages notifications
// be tested without a relay, a dispatcher or a provider: after the code
// under test commits, assert what it staged (to whom, on which channel,
// with which template and data, scheduled when), in the spirit of
// Laravel's Notification::fake() and River's rivertest.
//
//	staged := notificationtest.New(t, db, schema)
//	confirmBooking(ctx, db, 7) // the code under test: it stages in its transaction
//	req := staged.Require(t, notificationtest.Want{Channel: "mail", Recipient: "ada@example.com", Template: "booking_confirmed"})
//	staged.RequireNone(t, notificationtest.Want{Channel: "sms"})
//
// It reads the outbox of a schema the test owns: Schema makes one, or use
// your own. Only committed requests are seen, as a relay would see them;
// a rolled-back write stages nothing.
package notificationtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/notification"
)

// Staged is a request as it was staged.
type Staged struct {
	ID        uuid.UUID
	Module    string
	Channel   string
	Recipient string
	Template  string
	Data      map[string]any // as JSON gives it back: numbers are float64
	// NotBefore is when the request is due: its Request.NotBefore, or the
	// staging time when it had none. It is read from the outbox row, so a
	// relay that claims or retries the request moves it.
	NotBefore     time.Time
	StagedAt      time.Time
	CorrelationID string
}

// Want selects staged requests. A zero field matches anything; Data
// matches a request whose data holds every key of Want.Data with an equal
// value (numbers compare as float64, as JSON gives them back).
type Want struct {
	Module    string
	Channel   string
	Recipient string
	Template  string
	Data      map[string]any
}

func (w Want) matches(s Staged) bool {
	if w.Module != "" && w.Module != s.Module || w.Channel != "" && w.Channel != s.Channel ||
		w.Recipient != "" && w.Recipient != s.Recipient || w.Template != "" && w.Template != s.Template {
		return false
	}
	for k, v := range w.Data {
		got, ok := s.Data[k]
		if !ok || !reflect.DeepEqual(normalize(v), got) {
			return false
		}
	}
	return true
}

// normalize gives v the shape JSON gives it back.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

func (w Want) String() string {
	var parts []string
	for _, f := range [][2]string{{"module", w.Module}, {"channel", w.Channel}, {"recipient", w.Recipient}, {"template", w.Template}} {
		if f[1] != "" {
			parts = append(parts, f[0]+" "+f[1])
		}
	}
	if len(w.Data) > 0 {
		parts = append(parts, fmt.Sprintf("data %v", w.Data))
	}
	if len(parts) == 0 {
		return "any request"
	}
	return strings.Join(parts, ", ")
}

// Recorder reads what was staged into one schema's outbox after it was
// made. Its methods are safe for concurrent use.
type Recorder struct {
	db     *sql.DB
	schema string
	before any // the ids of the requests committed when the recorder was made, an array
}

// New returns a Recorder of the requests staged into schema ("" means the
// default) from now on, read through db: every request committed after
// New, even by a transaction that began before it. New reads the ids of
// the requests already there, so give a test a schema of its own
// (Schema) rather than a busy one. It fails the test when the schema's
// outbox cannot be read.
func New(tb testing.TB, db *sql.DB, schema string) *Recorder {
	tb.Helper()
	if schema == "" {
		schema = tidings.SchemaDefault
	}
	if err := ident.CheckSchema("schema", schema); err != nil {
		tb.Fatalf("notificationtest: %v", err)
	}
	rows, err := db.QueryContext(context.Background(), `SELECT id::text FROM `+ident.Quote(schema)+`.outbox WHERE kind = $1`,
		notification.Kind)
	if err != nil {
		tb.Fatalf("notificationtest: read the outbox: %v", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			tb.Fatalf("notificationtest: read the outbox: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("notificationtest: read the outbox: %v", err)
	}
	return &Recorder{db: db, schema: schema, before: pgarray.Of(ids)}
}

// All returns every request staged since r was made, in staging order.
func (r *Recorder) All(tb testing.TB) []Staged {
	tb.Helper()
	rows, err := r.db.QueryContext(context.Background(), `SELECT id, module, payload, available_at, created_at, correlation_id
		FROM `+ident.Quote(r.schema)+`.outbox WHERE kind = $1 AND NOT id = ANY ($2::uuid[]) ORDER BY created_at, id`,
		notification.Kind, r.before)
	if err != nil {
		tb.Fatalf("notificationtest: read the outbox: %v", err)
	}
	defer rows.Close()
	var out []Staged
	for rows.Next() {
		var s Staged
		var payload []byte
		if err := rows.Scan(&s.ID, &s.Module, &payload, &s.NotBefore, &s.StagedAt, &s.CorrelationID); err != nil {
			tb.Fatalf("notificationtest: read the outbox: %v", err)
		}
		var p struct {
			Channel   string         `json:"channel"`
			Recipient string         `json:"recipient"`
			Template  string         `json:"template"`
			Data      map[string]any `json:"data"`
		}
		if err := json.Unmarshal(payload, &p); err != nil {
			tb.Fatalf("notificationtest: request %s does not decode: %v", s.ID, err)
		}
		s.Channel, s.Recipient, s.Template, s.Data = p.Channel, p.Recipient, p.Template, p.Data
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("notificationtest: read the outbox: %v", err)
	}
	return out
}

// Find returns the requests staged since r was made that want matches, in
// staging order.
func (r *Recorder) Find(tb testing.TB, want Want) []Staged {
	tb.Helper()
	var out []Staged
	for _, s := range r.All(tb) {
		if want.matches(s) {
			out = append(out, s)
		}
	}
	return out
}

// Require fails the test unless exactly one request staged since r was
// made matches want, and returns it.
func (r *Recorder) Require(tb testing.TB, want Want) Staged {
	tb.Helper()
	return r.RequireN(tb, want, 1)[0]
}

// RequireN fails the test unless exactly n requests staged since r was
// made match want, and returns them in staging order.
func (r *Recorder) RequireN(tb testing.TB, want Want, n int) []Staged {
	tb.Helper()
	all := r.All(tb)
	var got []Staged
	for _, s := range all {
		if want.matches(s) {
			got = append(got, s)
		}
	}
	if len(got) != n {
		tb.Fatalf("notificationtest: want %d staged requests of %s, have %d; staged:%s", n, want, len(got), list(all))
	}
	return got
}

// RequireNone fails the test if a request staged since r was made
// matches want: RequireNone(t, Want{}) is "nothing was staged".
func (r *Recorder) RequireNone(tb testing.TB, want Want) {
	tb.Helper()
	if got := r.Find(tb, want); len(got) > 0 {
		tb.Fatalf("notificationtest: want no staged request of %s, have %d:%s", want, len(got), list(got))
	}
}

// list describes staged requests for a failure message.
func list(all []Staged) string {
	if len(all) == 0 {
		return " none"
	}
	var b strings.Builder
	for _, s := range all {
		fmt.Fprintf(&b, "\n\t%s: module %s, channel %s, recipient %s, template %s", s.ID, s.Module, s.Channel, s.Recipient, s.Template)
		if len(s.Data) > 0 {
			fmt.Fprintf(&b, ", data keys %v", slices.Sorted(maps.Keys(s.Data)))
		}
		if s.NotBefore.After(s.StagedAt) {
			fmt.Fprintf(&b, ", not before %s", s.NotBefore.Format(time.RFC3339))
		}
	}
	return b.String()
}

var schemas atomic.Int64

// Schema creates a fresh schema with every table of the library
// (tidings.Migrate) through db, which must be allowed to create schemas,
// and drops it when the test ends (so db must stay open until then: close
// it in a Cleanup registered before Schema, not with defer); it returns
// the schema's name. Stage
// into it with a notification.Client of that schema.
func Schema(tb testing.TB, db *sql.DB) string {
	tb.Helper()
	name := fmt.Sprintf("notificationtest_%d_%d", os.Getpid(), schemas.Add(1))
	tb.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+ident.Quote(name)+` CASCADE`); err != nil {
			tb.Errorf("notificationtest: drop schema %s: %v", name, err)
		}
	})
	if err := tidings.Migrate(context.Background(), db, name); err != nil {
		tb.Fatalf("notificationtest: %v", err)
	}
	return name
}
