package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

// claimer is a supervisor of module "orders" on a schema of its own, whose
// claims and settles a test makes itself, and its pool.
func claimer(t *testing.T) (*supervisor, *sql.DB) {
	t.Helper()
	schema := pgtest.Schema(t, Migrate)
	db := pgtest.DB(t)
	s, err := newSupervisor(db, Config{Module: "orders", Schema: schema}.withDefaults(),
		SinkFunc(func(ctx context.Context, rec Record) Result { return Done() }))
	require.NoError(t, err)
	return s, db
}

// A settle whose answer was lost is sent again (flush retries it). When it
// gave the record back (Later, Unsure, a release at shutdown), the hand
// counter it was fenced by comes back with the next claim: the settle sent
// again must not land on that claim and give it back too, while its hand
// is still at work, so that the hand's own answer is fenced off and the
// record handed a third time. Each claim is named by the settle that
// answers it.
func TestASettleSentAgainDoesNotLandOnTheNextClaim(t *testing.T) {
	t.Parallel()
	s, db := claimer(t)
	id, err := s.ob.Stage(t.Context(), db, Message{Module: "orders", Kind: "order.placed", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	claim := func(what string) Record {
		t.Helper()
		recs, _, err := s.claim(t.Context(), 10, rooms{other: 10, conns: 10})
		require.NoError(t, err)
		require.Len(t, recs, 1, "%s: the record is claimed", what)
		return recs[0]
	}
	settle := func(st settlement) int {
		t.Helper()
		var landed int
		require.NoError(t, db.QueryRowContext(t.Context(), s.ob.q.settle, settleArgs([]settlement{st})...).Scan(&landed))
		return landed
	}

	first := claim("first hand")
	givenBack := settlementOf(first, Later(0))
	require.Equal(t, 1, settle(givenBack), "the first hand gives the record back")
	second := claim("second hand")
	require.Equal(t, first.Hand, second.Hand, "a record given back does not count the hand")

	require.Zero(t, settle(givenBack), "the first hand's settle, sent again, lands on the second claim")
	require.Equal(t, 1, settle(settlementOf(second, Done())), "the second hand's answer is fenced off")
	var processed bool
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT processed_at IS NOT NULL FROM "`+s.cfg.Schema+`".outbox WHERE id = $1`, id).Scan(&processed))
	require.True(t, processed, "the record is processed by its second hand")
}
