package relay

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// A claim walks each lane the last claim found from that lane's floor, not
// from its start, and finds the lanes it does not know before, between and
// after the ones it does. A record that falls due behind its lane's floor
// (here one staged with a NotBefore an hour back, as a staging transaction
// open for an hour would stage one) is left to the claim that walks every
// lane from its start, which the relay makes once SweepInterval has passed
// since the last.
func TestAClaimWalksTheLanesItKnowsFromTheirFloors(t *testing.T) {
	t.Parallel()
	s, db := claimer(t)
	stage := func(lane string, notBefore time.Time) uuid.UUID {
		t.Helper()
		id, err := s.ob.Stage(t.Context(), db, Message{Module: "orders", Kind: "order.placed", Lane: lane,
			Payload: json.RawMessage(`{}`), NotBefore: notBefore})
		require.NoError(t, err)
		return id
	}
	claim := func() []uuid.UUID {
		t.Helper()
		recs, _, err := s.claim(t.Context(), 10, rooms{other: 10, conns: 10})
		require.NoError(t, err)
		ids := make([]uuid.UUID, len(recs))
		for i, rec := range recs {
			ids[i] = rec.ID
		}
		return ids
	}

	first := stage("mail", time.Time{})
	require.ElementsMatch(t, []uuid.UUID{first}, claim(), "the first claim walks every lane from its start")
	require.Contains(t, s.floors, "mail", "the claim gave the lane it found a floor")

	behind := stage("mail", time.Now().Add(-time.Hour))
	mail, before, after := stage("mail", time.Time{}), stage("a", time.Time{}), stage("z", time.Time{})
	require.ElementsMatch(t, []uuid.UUID{mail, before, after}, claim(),
		"a claim from the floors finds the known lane's record after its floor and the lanes it did not know; "+
			"the record behind mail's floor waits")

	s.walked = time.Now().Add(-s.cfg.SweepInterval)
	require.ElementsMatch(t, []uuid.UUID{behind}, claim(), "once SweepInterval has passed, a claim walks every lane from its start")
}
