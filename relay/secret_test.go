package relay_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/relay"
)

// A record's secret reaches its sink, and is gone from the database in the
// transaction that ends the record, however it ends.
func TestSecretIsErasedWhenTheRecordEnds(t *testing.T) {
	t.Parallel()
	secret := []byte("code-493817")
	b := setup(t)
	stage := func(kind string, withSecret bool) uuid.UUID {
		msg := relay.Message{Module: module, Kind: kind, Payload: payload(1)}
		if withSecret {
			msg.Secret = secret
		}
		id, err := b.ob.Stage(t.Context(), b.db, msg)
		require.NoError(t, err)
		return id
	}
	// StageBatch, secrets and none mixed.
	batch, err := b.ob.StageBatch(t.Context(), b.db, []relay.Message{
		{Module: module, Kind: "done", Payload: payload(2), Secret: secret},
		{Module: module, Kind: "done", Payload: payload(3)},
	})
	require.NoError(t, err)
	done, dead, plain := stage("done", true), stage("dead", true), stage("done", false)
	req := relay.Message{Module: module, Kind: "later", Payload: payload(4), Secret: secret, NotBefore: time.Now().Add(time.Hour)}
	cancelled, err := b.ob.Stage(t.Context(), b.db, req)
	require.NoError(t, err)
	finished, err := b.ob.Stage(t.Context(), b.db, req) // as a provider's report ends a pending request
	require.NoError(t, err)
	require.Equal(t, 5, b.count(t, "secret IS NOT NULL"), "a secret per record staged with one")

	sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
		if rec.Kind == "dead" {
			return relay.Dead(errors.New("no"))
		}
		return relay.Done()
	})
	supervise(t, b.db, b.config(t), sink)
	b.eventually(t, "processed_at IS NOT NULL OR failed_at IS NOT NULL", 5, 10*time.Second)
	for _, rec := range sink.records() {
		want := map[uuid.UUID]bool{done: true, dead: true, batch[0]: true}[rec.ID]
		require.Equal(t, want, bytes.Equal(secret, rec.Secret), "the secret of %s reaches its sink", rec.ID)
		if rec.ID == plain || rec.ID == batch[1] {
			require.Nil(t, rec.Secret)
		}
	}
	ok, err := b.ob.Cancel(t.Context(), b.db, cancelled)
	require.NoError(t, err)
	require.True(t, ok)
	ended, err := b.ob.Finish(t.Context(), b.db, []uuid.UUID{finished}, "ended", nil)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{finished}, ended)
	require.Zero(t, b.count(t, "secret IS NOT NULL"), "processed, dead, cancelled and finished: every secret erased")

	// A dead record re-emitted has no secret any more.
	n, err := b.ob.Reemit(t.Context(), b.db, &relay.DeadFilter{IDs: []uuid.UUID{dead}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	sink.waitHands(t, 6, 10*time.Second)
	recs := sink.records()
	require.Equal(t, dead, recs[len(recs)-1].ID)
	require.Nil(t, recs[len(recs)-1].Secret)
}

// A record that dies at its claim (MaxHands) loses its secret in the
// claim's own statement.
func TestSecretIsErasedWhenTheClaimKillsTheRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "x", Payload: payload(1), Secret: []byte("s")})
	require.NoError(t, err)
	_, err = b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET hands = 25 WHERE id = $1`, id)
	require.NoError(t, err)
	cfg := b.config(t)
	cfg.MaxHands = 25
	sink := newRecorder(nil)
	supervise(t, b.db, cfg, sink)
	b.eventually(t, "failed_at IS NOT NULL", 1, 10*time.Second)
	require.Zero(t, sink.total(), "never handed")
	require.Zero(t, b.count(t, "secret IS NOT NULL"))
}

func TestSecretTooLongIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "x", Payload: payload(1),
		Secret: make([]byte, relay.SecretMaxLen+1)})
	require.ErrorIs(t, err, relay.ErrInvalidMessage)
	require.ErrorContains(t, err, "Secret is 65537 bytes long")
	require.Zero(t, b.count(t, "true"))
}
