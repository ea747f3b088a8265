// Package pqlisten is the relay's LISTEN session through lib/pq
// (pq.Listener), for services whose database/sql pool is lib/pq's. Only
// they import it: package relay imports no driver, so a pgx service, which
// uses relay/pgxlisten instead, never has lib/pq in its dependency graph.
//
//	relay.Supervise(ctx, db, &relay.Config{Module: "hr", Listener: pqlisten.New(dsn)}, sink)
package pqlisten

import (
	"context"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/tidings-go/tidings/relay"
)

// Reconnect bounds of the LISTEN session.
const (
	ReconnectMin = 50 * time.Millisecond
	ReconnectMax = 2 * time.Second
)

// Listener LISTENs through lib/pq on a session of its own, which it opens
// with the connection string it was made with: the relay's wake-up
// (relay.Config.Listener). It is for one relay at a time.
type Listener struct {
	dsn string
}

var _ relay.Listener = (*Listener)(nil)

// New returns a Listener that connects with dsn, a lib/pq connection string
// (usually the pool's own). It connects nothing yet.
func New(dsn string) *Listener { return &Listener{dsn: dsn} }

// Check connects once with the Listener's connection string and closes the
// session.
func (l *Listener) Check(ctx context.Context) error {
	c, err := pq.NewConnector(l.dsn)
	if err != nil {
		return err
	}
	conn, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	return conn.Close()
}

// Listen LISTENs on channel until ctx ends; see relay.Listener. lib/pq
// reconnects between ReconnectMin and ReconnectMax apart.
func (l *Listener) Listen(ctx context.Context, channel string, h relay.ListenHandler) {
	pl := pq.NewListener(l.dsn, ReconnectMin, ReconnectMax,
		func(ev pq.ListenerEventType, err error) {
			switch ev {
			case pq.ListenerEventConnectionAttemptFailed, pq.ListenerEventDisconnected:
				h.Lost(err)
			case pq.ListenerEventReconnected:
				h.Listening()
			}
		})
	var wg sync.WaitGroup
	wg.Go(func() {
		// Blocks until the first connection; fails only once closed.
		if err := pl.Listen(channel); err == nil {
			h.Listening()
		}
	})
	notify := pl.NotificationChannel()
	for {
		select {
		case n, ok := <-notify:
			if !ok {
				wg.Wait()
				return
			}
			// A nil notification follows a reconnect, which Listening
			// already told.
			if n != nil {
				h.Notified(n.Extra)
			}
		case <-ctx.Done():
			_ = pl.Close()
			for range notify { // closed once the listener's goroutine ends
			}
			wg.Wait()
			return
		}
	}
}
