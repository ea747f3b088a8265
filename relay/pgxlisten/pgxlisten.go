// Package pgxlisten is the relay's LISTEN session through pgx
// (pgx.Conn.WaitForNotification), for services built on pgx v5: with it and
// a pool from stdlib.OpenDBFromPool, a relay runs without lib/pq.
//
//	db := stdlib.OpenDBFromPool(pool)
//	relay.Supervise(ctx, db, &relay.Config{Module: "hr", Listener: pgxlisten.New(pool.Config().ConnConfig)}, sink)
package pgxlisten

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidings-go/tidings/relay"
)

// Reconnect bounds of the LISTEN session: the first retry waits
// ReconnectMin, each next one twice as long, up to ReconnectMax.
const (
	ReconnectMin = 50 * time.Millisecond
	ReconnectMax = 2 * time.Second
)

// closeTimeout bounds the goodbye to a session that is being closed.
const closeTimeout = 5 * time.Second

// Listener LISTENs through pgx on a connection of its own, outside any
// pool, so it never holds one of the pool's connections: the relay's
// wake-up (relay.Config.Listener). It is for one relay at a time.
type Listener struct {
	cfg *pgx.ConnConfig
}

var _ relay.Listener = (*Listener)(nil)

// New returns a Listener that connects with a copy of cfg, usually the
// pool's (pool.Config().ConnConfig). It connects nothing yet.
func New(cfg *pgx.ConnConfig) *Listener { return &Listener{cfg: cfg.Copy()} }

// Check connects once and closes the connection.
func (l *Listener) Check(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// Listen LISTENs on channel until ctx ends; see relay.Listener.
func (l *Listener) Listen(ctx context.Context, channel string, h relay.ListenHandler) {
	wait := ReconnectMin
	for {
		listened, err := l.session(ctx, channel, h)
		if ctx.Err() != nil {
			return
		}
		h.Lost(err)
		if listened {
			wait = ReconnectMin
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, ReconnectMax)
	}
}

// session connects, LISTENs and passes notifications on until the
// connection fails or ctx ends; listened says whether LISTEN took effect.
func (l *Listener) session(ctx context.Context, channel string, h relay.ListenHandler) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	h.Listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		h.Notified(n.Payload)
	}
}
