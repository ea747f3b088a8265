package relay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/relay"
)

func TestOperate(t *testing.T) {
	t.Parallel()

	// killAll makes every record of b dead through a relay, and returns
	// their ids.
	killAll := func(t *testing.T, b testBundle, n int) []uuid.UUID {
		ids := b.stage(t, n)
		sink := newRecorder(func(context.Context, relay.Record) relay.Result {
			return relay.Dead(errors.New("template missing"))
		})
		stop := supervise(t, b.db, b.config(t), sink)
		b.eventually(t, "failed_at IS NOT NULL", n, 10*time.Second)
		stop()
		return ids
	}

	t.Run("ListDeadFilters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := killAll(t, b, 3)
		_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: "other", Kind: "x", Payload: payload(9)})
		require.NoError(t, err)

		dead, err := b.ob.ListDead(t.Context(), b.db, &relay.DeadFilter{Module: module})
		require.NoError(t, err)
		require.Len(t, dead, 3)
		for _, d := range dead {
			require.Equal(t, "template missing", d.Reason)
			require.Equal(t, 1, d.Attempts)
			require.Equal(t, "order.placed", d.Kind)
			require.False(t, d.FailedAt.Before(d.CreatedAt))
		}
		for name, f := range map[string]*relay.DeadFilter{
			"OtherModule": {Module: "other"},
			"OtherKind":   {Kind: "order.cancelled"},
			"Future":      {Since: time.Now().Add(time.Hour)},
			"Past":        {Until: time.Now().Add(-time.Hour)},
			"UnknownID":   {IDs: []uuid.UUID{uuid.New()}},
			"NoIDs":       {IDs: []uuid.UUID{}}, // an empty selection, not every record
		} {
			dead, err := b.ob.ListDead(t.Context(), b.db, f)
			require.NoError(t, err, name)
			require.Empty(t, dead, name)
		}
		n, err := b.ob.Reemit(t.Context(), b.db, &relay.DeadFilter{IDs: []uuid.UUID{}})
		require.NoError(t, err)
		require.Zero(t, n, "an empty selection re-emits nothing")
		dead, err = b.ob.ListDead(t.Context(), b.db, &relay.DeadFilter{IDs: ids[1:2]})
		require.NoError(t, err)
		require.Len(t, dead, 1)
		require.Equal(t, ids[1], dead[0].ID)
		dead, err = b.ob.ListDead(t.Context(), b.db, &relay.DeadFilter{Limit: 2, Since: time.Now().Add(-time.Hour)})
		require.NoError(t, err)
		require.Len(t, dead, 2)
	})

	t.Run("ReemitByIDKeepsTheIDAndDelivers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := killAll(t, b, 3)

		n, err := b.ob.Reemit(t.Context(), b.db, &relay.DeadFilter{IDs: ids[:1]})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		// The cause is fixed: the sink now answers done.
		sink := newRecorder(nil)
		supervise(t, b.db, b.config(t), sink) // sweep every hour: the re-emit wakes it
		b.eventually(t, "processed_at IS NOT NULL", 1, 10*time.Second)
		require.Equal(t, 1, sink.handsOf(ids[0]))
		require.Equal(t, 0, sink.records()[0].Attempts, "a fresh budget")
		require.Empty(t, sink.records()[0].LastError, "the reason it died of is on its timeline, not the first hand's")
		require.Equal(t, 2, b.count(t, "failed_at IS NOT NULL"))

		n, err = b.ob.Reemit(t.Context(), b.db, &relay.DeadFilter{Module: module})
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		b.eventually(t, "processed_at IS NOT NULL", 3, 10*time.Second)
		n, err = b.ob.Reemit(t.Context(), b.db, nil)
		require.NoError(t, err)
		require.Zero(t, n, "nothing dead is left")
	})

	t.Run("PurgeRemovesOnlyOldSettledRecords", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		killAll(t, b, 2)
		b.stage(t, 2500)
		// A retry first, so each record has an entry in the timeline table.
		stop := supervise(t, b.db, b.config(t), newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
			if rec.Attempts == 0 {
				return relay.Retry(0, errors.New("busy"))
			}
			return relay.Done()
		}))
		b.eventually(t, "processed_at IS NOT NULL", 2500, 30*time.Second)
		stop()
		pendingID := b.stage(t, 1)[0]
		_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET processed_at = processed_at - interval '8 days' WHERE processed_at IS NOT NULL AND id <> ALL (SELECT id FROM "`+b.schema+`".outbox WHERE processed_at IS NOT NULL ORDER BY id LIMIT 10)`)
		require.NoError(t, err)

		n, err := b.ob.Purge(t.Context(), b.db, 7*24*time.Hour)
		require.NoError(t, err)
		require.EqualValues(t, 2490, n, "in batches of 1000, until none is left")
		require.Equal(t, 10, b.count(t, "processed_at IS NOT NULL"), "recent ones stay")
		require.Equal(t, 2, b.count(t, "failed_at IS NOT NULL"), "dead ones stay")
		require.Equal(t, 1, b.count(t, "id = '"+pendingID.String()+"'"), "pending ones stay")
		var entries, orphans int
		require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT count(*),
				count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM "`+b.schema+`".outbox o WHERE o.id = t.record_id))
			FROM "`+b.schema+`".timeline t`).Scan(&entries, &orphans))
		require.Zero(t, orphans, "a purged record's timeline goes with it")
		require.Equal(t, 12, entries, "the timelines of the records kept stay: a retry each, and the deaths")
	})

	t.Run("StatsCountsByLaneAndCode", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stage := func(lane string, notBefore time.Time, n int) {
			for i := range n {
				_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "order.placed", Lane: lane,
					Payload: payload(i), NotBefore: notBefore})
				require.NoError(t, err)
			}
		}
		stage("mail", time.Time{}, 3)
		stage("sms", time.Time{}, 2)
		stage("sms", time.Now().Add(time.Hour), 4)
		_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: "other", Kind: "x", Payload: payload(0)})
		require.NoError(t, err)
		// Kill the two due sms records, under two codes; the rest stay.
		var n atomic.Int64
		sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
			if rec.Lane != "sms" {
				return relay.Later(time.Hour)
			}
			if n.Add(1) == 1 {
				return relay.Dead(errors.New("invalid number")).WithCode("recipient.invalid")
			}
			return relay.Dead(errors.New("blocked")).WithCode("provider.rejected")
		})
		stop := supervise(t, b.db, b.config(t), sink)
		b.eventually(t, "failed_at IS NOT NULL", 2, 10*time.Second)
		b.eventually(t, "lane = 'mail' AND available_at > now() + interval '50 minutes'", 3, 10*time.Second)
		stop()
		stage("mail", time.Time{}, 1) // due now

		st, err := b.ob.Stats(t.Context(), b.db, module)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), st.At, time.Minute, "the database's clock")
		require.Len(t, st.Lanes, 2, "the module's lanes only: %+v", st.Lanes)
		mail, sms := st.Lanes[0], st.Lanes[1]
		require.Equal(t, relay.LaneStats{Module: module, Lane: "mail", Due: 1, Scheduled: 3, OldestDue: mail.OldestDue}, mail)
		require.Less(t, mail.OldestDue, time.Minute)
		require.Equal(t, relay.LaneStats{Module: module, Lane: "sms", Scheduled: 4, Dead: 2}, sms)
		require.Equal(t, []relay.DeadCount{
			{Module: module, Lane: "sms", Code: "provider.rejected", Count: 1},
			{Module: module, Lane: "sms", Code: "recipient.invalid", Count: 1},
		}, st.Dead)

		all, err := b.ob.Stats(t.Context(), b.db, "")
		require.NoError(t, err)
		require.Len(t, all.Lanes, 3, "every module")
		require.Equal(t, relay.LaneStats{Module: "other", Due: 1, OldestDue: all.Lanes[2].OldestDue}, all.Lanes[2])
	})

	t.Run("CountDeadGroupsByCodeLaneAndModule", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		unavailable := relay.Dead(errors.New("unavailable")).WithCode("provider.unavailable")
		answers := map[uuid.UUID]relay.Result{}
		for _, m := range []struct {
			lane   string
			answer relay.Result
		}{
			{"sms", unavailable},
			{"sms", relay.Dead(errors.New("invalid number")).WithCode("recipient.invalid")},
			{"mail", unavailable},
			{"mail", relay.Done()}, // delivered: never counted
		} {
			id, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "x", Lane: m.lane, Payload: payload(0)})
			require.NoError(t, err)
			answers[id] = m.answer
		}
		sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result { return answers[rec.ID] })
		stop := supervise(t, b.db, b.config(t), sink)
		b.eventually(t, "failed_at IS NOT NULL OR processed_at IS NOT NULL", 4, 10*time.Second)
		stop()

		count := func(f *relay.DeadFilter, by relay.GroupBy) map[string]int64 {
			groups, err := b.ob.CountDead(t.Context(), b.db, f, by)
			require.NoError(t, err)
			out := map[string]int64{}
			for i, g := range groups {
				require.False(t, g.Last.Before(g.First), "%+v", g)
				if i > 0 {
					require.LessOrEqual(t, g.Count, groups[i-1].Count, "the largest group first")
				}
				out[g.Key] = g.Count
			}
			return out
		}
		require.Equal(t, map[string]int64{"provider.unavailable": 2, "recipient.invalid": 1}, count(nil, relay.ByCode))
		require.Equal(t, map[string]int64{"sms": 2, "mail": 1}, count(nil, relay.ByLane))
		require.Equal(t, map[string]int64{module: 3}, count(nil, relay.ByModule))
		require.Equal(t, map[string]int64{"sms": 1, "mail": 1}, count(&relay.DeadFilter{Code: "provider.unavailable"}, relay.ByLane))
		require.Equal(t, map[string]int64{"provider.unavailable": 1, "recipient.invalid": 1},
			count(&relay.DeadFilter{Lane: "sms"}, relay.ByCode))
		require.Empty(t, count(&relay.DeadFilter{Module: "other"}, relay.ByCode))
		require.Empty(t, count(&relay.DeadFilter{Since: time.Now().Add(time.Hour)}, relay.ByCode))

		_, err := b.ob.CountDead(t.Context(), b.db, nil, "recipient")
		require.ErrorContains(t, err, `group by "recipient"`)
	})

	t.Run("ThroughputCountsEachOfTheLastMinutes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.stage(t, 6)
		_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: "other", Kind: "x", Payload: payload(0)})
		require.NoError(t, err)
		stop := supervise(t, b.db, b.config(t), newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
			if rec.ID == ids[4] || rec.ID == ids[5] {
				return relay.Dead(errors.New("rejected"))
			}
			return relay.Done()
		}))
		b.eventually(t, "processed_at IS NOT NULL OR failed_at IS NOT NULL", 6, 10*time.Second)
		stop()
		// Two of the processed ones settled two and a half minutes ago,
		// one of them an hour ago; one of the dead died four and a half
		// minutes ago.
		for _, shift := range []struct {
			id  uuid.UUID
			col string
			ago string
		}{{ids[0], "processed_at", "150 seconds"}, {ids[1], "processed_at", "150 seconds"},
			{ids[2], "processed_at", "1 hour"}, {ids[4], "failed_at", "270 seconds"}} {
			_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET `+shift.col+` = now() - interval '`+shift.ago+`' WHERE id = $1`, shift.id)
			require.NoError(t, err)
		}

		minutes, err := b.ob.Throughput(t.Context(), b.db, module, 5)
		require.NoError(t, err)
		require.Len(t, minutes, 5, "every minute, those without a record too")
		for i := 1; i < len(minutes); i++ {
			require.Equal(t, time.Minute, minutes[i].Start.Sub(minutes[i-1].Start), "oldest first, a minute apart")
		}
		require.WithinDuration(t, time.Now().Add(-time.Minute), minutes[4].Start, time.Minute, "the last minute ends now")
		got := func(m []relay.Minute) [][2]int64 {
			var out [][2]int64
			for _, x := range m {
				out = append(out, [2]int64{x.Processed, x.Dead})
			}
			return out
		}
		require.Equal(t, [][2]int64{{0, 1}, {0, 0}, {2, 0}, {0, 0}, {1, 1}}, got(minutes))

		all, err := b.ob.Throughput(t.Context(), b.db, "", 1)
		require.NoError(t, err)
		require.Equal(t, [][2]int64{{1, 1}}, got(all), "the other module's record is pending")

		for _, n := range []int{0, relay.ThroughputMinutesMax + 1} {
			_, err := b.ob.Throughput(t.Context(), b.db, module, n)
			require.ErrorContains(t, err, "minutes", n)
		}
	})

	t.Run("SupervisorPurgesPeriodically", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.stage(t, 5)
		// Another module's record, settled a day ago: its own supervisor
		// keeps it for that one's Retention, not this one's.
		other, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: "other", Kind: "x", Payload: payload(0)})
		require.NoError(t, err)
		_, err = b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET processed_at = now() - interval '1 day' WHERE id = $1`, other)
		require.NoError(t, err)
		cfg := b.config(t)
		cfg.Retention = time.Millisecond
		cfg.PurgeInterval = 50 * time.Millisecond
		purger := &purgingSink{}
		supervise(t, b.db, cfg, purger)
		b.eventually(t, "module = '"+module+"'", 0, 10*time.Second)
		require.Equal(t, 1, b.count(t, "id = '"+other.String()+"'"), "a supervisor purges only its own module's records")
		require.Eventually(t, func() bool { return purger.calls.Load() > 0 }, 5*time.Second, 10*time.Millisecond)
	})
}

// purgingSink answers done and counts the purges the supervisor asks of it.
type purgingSink struct{ calls atomic.Int64 }

func (p *purgingSink) Handle(context.Context, relay.Record) relay.Result { return relay.Done() }

func (p *purgingSink) Purge(context.Context) (int64, error) {
	p.calls.Add(1)
	return 0, nil
}
