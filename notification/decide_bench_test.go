package notification

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
)

// BenchmarkDecide applies the recipient rules to a batch of 355 requests,
// each about a subject of its own with three preferences (one of which
// applies) and quiet hours not in effect, as tidings-bench -policies does:
// the batch's inbox claims with its rules read (one statement, in a
// transaction rolled back) and the decision of each request. Its
// allocations are the steady figure; its time includes the server's.
func BenchmarkDecide(b *testing.B) {
	schema := rulesSchema(b)
	q := `"` + schema + `"`
	admin := pgtest.AdminDB(b)
	later := time.Now().UTC().Add(6 * time.Hour)
	for _, stmt := range []string{
		`INSERT INTO ` + q + `.preference (subject, category, channel, enabled)
			SELECT 'subject-' || i, 'welcome', 'mail', true FROM generate_series(0, 999) i
			UNION ALL SELECT 'subject-' || i, 'marketing', '', false FROM generate_series(0, 999) i
			UNION ALL SELECT 'subject-' || i, '', 'sms', false FROM generate_series(0, 999) i`,
		fmt.Sprintf(`INSERT INTO `+q+`.quiet_hours (subject, time_zone, windows)
			SELECT 'subject-' || i, 'UTC', '[{"start": "%02d:00", "end": "%02d:30"}]' FROM generate_series(0, 999) i`,
			later.Hour(), later.Hour()),
		`VACUUM (ANALYZE) ` + q + `.preference`,
		`VACUUM (ANALYZE) ` + q + `.quiet_hours`,
	} {
		_, err := admin.ExecContext(b.Context(), stmt)
		require.NoError(b, err)
	}
	d, err := NewDispatcher(&Config{Deliveries: map[string]delivery.Delivery{
		"mail": delivery.Func(func(context.Context, delivery.Pending) delivery.Outcome { return delivery.Delivered() }),
	}})
	require.NoError(b, err)
	rc := relay.Config{Schema: schema, MaxHands: relay.MaxHandsDefault, HandTimeout: relay.HandTimeoutDefault, Lease: relay.LeaseDefault}
	require.NoError(b, d.Prepare(b.Context(), pgtest.Open(b, 2), rc))
	bind := d.binding()

	const n = 355
	recs, jobs := make([]relay.Record, n), make([]job, n)
	for i := range n {
		req := Request{Channel: "mail", Recipient: fmt.Sprintf("user%d@example.com", i), Template: "welcome",
			Subject: fmt.Sprintf("subject-%d", i), Category: "welcome", ExpiresAt: time.Now().Add(24 * time.Hour)}
		body, err := req.encode()
		require.NoError(b, err)
		recs[i] = relay.Record{ID: uuid.New(), Lane: "mail", Kind: Kind, Payload: body}
		p, err := decode(body)
		require.NoError(b, err)
		jobs[i] = job{i: i, rec: recs[i], req: p, ch: d.channels["mail"],
			p: delivery.Pending{ID: recs[i].ID, Channel: p.Channel, Recipient: p.Recipient}}
	}
	batch := make([]job, n)
	b.ReportAllocs()
	for b.Loop() {
		copy(batch, jobs)
		tx, err := beginClaim(b.Context(), bind.db, bind.pipe)
		require.NoError(b, err)
		first, _, r, err := d.claim(b.Context(), bind, tx, batch, nil)
		require.NoError(b, err)
		if stops := d.decide(r, batch, first); len(first) != n || len(stops) != 0 {
			b.Fatalf("%d of %d requests claimed, %d stopped by a rule", len(first), n, len(stops))
		}
		tx.end()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/request")
}
