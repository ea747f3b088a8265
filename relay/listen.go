package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lib/pq"
)

// Reconnect bounds of the LISTEN session.
const (
	listenReconnectMin = 50 * time.Millisecond
	listenReconnectMax = 2 * time.Second
)

// ListenDownSweep is how often the relay sweeps while its LISTEN session
// is away, whatever Config.SweepInterval says: a broken wake-up costs
// latency, not a sweep interval.
const ListenDownSweep = time.Second

// listenCheckTimeout bounds the start-up check of Config.ListenDSN.
const listenCheckTimeout = 10 * time.Second

// checkListen connects once to cfg.ListenDSN, so a wrong one is an error
// at start rather than a relay that waits for the sweep forever.
func (s *supervisor) checkListen(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, listenCheckTimeout)
	defer cancel()
	c, err := pq.NewConnector(s.cfg.ListenDSN)
	if err == nil {
		var conn interface{ Close() error }
		if conn, err = c.Connect(ctx); err == nil {
			err = conn.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("%w: ListenDSN: cannot connect the LISTEN session: %w", ErrConfig, err)
	}
	return nil
}

// listen wakes the claim loop on every notification for the module, and
// after every reconnect (a notification sent while the session was away is
// lost), until ctx ends.
func (s *supervisor) listen(ctx context.Context) {
	l := pq.NewListener(s.cfg.ListenDSN, listenReconnectMin, listenReconnectMax,
		func(ev pq.ListenerEventType, err error) {
			switch ev {
			case pq.ListenerEventConnectionAttemptFailed, pq.ListenerEventDisconnected:
				if s.listening.Swap(false) {
					s.log.WarnContext(ctx, "listen session lost; sweeping every second until it is back", "err", err)
					s.poke(s.wake) // the loop may sleep a whole SweepInterval
				}
			case pq.ListenerEventReconnected:
				s.listening.Store(true)
				s.log.InfoContext(ctx, "listen session back")
			}
		})
	var wg sync.WaitGroup
	wg.Go(func() {
		// Blocks until the first connection; fails only once closed.
		if err := l.Listen(s.ob.q.channel); err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "listen failed; relying on the sweep", "err", err)
			}
			return
		}
		// A record committed before LISTEN took effect sent its wake-up to
		// nobody: look once more.
		s.listening.Store(true)
		s.poke(s.wake)
	})
	notify := l.NotificationChannel()
	for {
		select {
		case n, ok := <-notify:
			if !ok {
				wg.Wait()
				return
			}
			if n == nil || n.Extra == s.cfg.Module {
				s.poke(s.wake)
			}
		case <-ctx.Done():
			_ = l.Close()
			for range notify { // closed once the listener's goroutine ends
			}
			wg.Wait()
			return
		}
	}
}
