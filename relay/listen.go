package relay

import (
	"context"
	"sync"
	"time"

	"github.com/lib/pq"
)

// Reconnect bounds of the LISTEN session.
const (
	listenReconnectMin = 50 * time.Millisecond
	listenReconnectMax = 2 * time.Second
)

// listen wakes the claim loop on every notification for the module, and
// after every reconnect (a notification sent while the session was away is
// lost), until ctx ends.
func (s *supervisor) listen(ctx context.Context) {
	l := pq.NewListener(s.cfg.ListenDSN, listenReconnectMin, listenReconnectMax,
		func(ev pq.ListenerEventType, err error) {
			switch ev {
			case pq.ListenerEventConnectionAttemptFailed, pq.ListenerEventDisconnected:
				s.log.WarnContext(ctx, "listen session lost; reconnecting", "err", err)
			case pq.ListenerEventReconnected:
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
