package relay

import (
	"context"
	"fmt"
	"time"
)

// ListenDownSweep is how often the relay sweeps while its LISTEN session
// is away, whatever Config.SweepInterval says: a broken wake-up costs
// latency, not a sweep interval.
const ListenDownSweep = time.Second

// listenCheckTimeout bounds the start-up check of Config.Listener.
const listenCheckTimeout = 10 * time.Second

// Listener is the LISTEN session that wakes a relay when a staging write
// commits (Config.Listener). Package relay speaks no wire protocol of its
// own, so that a service pulls in one PostgreSQL driver only: relay/pqlisten
// listens through lib/pq and relay/pgxlisten through pgx. An
// implementation is safe for the one relay that uses it; each Supervise
// call needs its own.
type Listener interface {
	// Check connects once and disconnects, so that a wrong setting is an
	// error when the relay starts rather than a relay that waits for the
	// sweep forever.
	Check(ctx context.Context) error

	// Listen LISTENs on the NOTIFY channel name until ctx ends,
	// reconnecting whenever the session is lost, and tells h what
	// happens. It returns once ctx has ended and its session is closed.
	Listen(ctx context.Context, name string, h ListenHandler)
}

// ListenHandler is what a Listener tells its relay. Its methods are safe
// for concurrent use and return at once.
type ListenHandler interface {
	// Listening says that LISTEN took effect: on the first connection, and
	// again after each reconnect. A notification sent while the session
	// was away was lost, so the relay looks for due records then.
	Listening()

	// Notified passes on a notification on the channel, with its payload
	// (the module to wake).
	Notified(payload string)

	// Lost says that the session is away, err saying why; the Listener is
	// reconnecting. Until Listening, the relay sweeps every
	// ListenDownSweep.
	Lost(err error)
}

// checkListen connects the LISTEN session once.
func (s *supervisor) checkListen(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, listenCheckTimeout)
	defer cancel()
	if err := s.cfg.Listener.Check(ctx); err != nil {
		return fmt.Errorf("%w: Listener: cannot connect the LISTEN session: %w", ErrConfig, err)
	}
	return nil
}

// listen wakes the claim loop on every notification for the module, and
// whenever LISTEN takes effect (a notification sent while the session was
// away is lost), until ctx ends.
func (s *supervisor) listen(ctx context.Context) {
	s.cfg.Listener.Listen(ctx, s.ob.q.channel, listenEvents{s: s, ctx: ctx})
}

// listenEvents is the supervisor as its Listener's ListenHandler.
type listenEvents struct {
	s   *supervisor
	ctx context.Context
}

func (e listenEvents) Listening() {
	if e.s.listenedOnce.Swap(true) {
		e.s.log.InfoContext(e.ctx, "listen session back")
	}
	e.s.listening.Store(true)
	e.s.poke(e.s.wake) // a record committed before LISTEN took effect woke nobody
}

func (e listenEvents) Notified(payload string) {
	if payload == e.s.cfg.Module {
		e.s.poke(e.s.wake)
	}
}

func (e listenEvents) Lost(err error) {
	if e.s.listening.Swap(false) {
		e.s.log.WarnContext(e.ctx, "listen session lost; sweeping every second until it is back", "err", err)
		e.s.poke(e.s.wake) // the loop may sleep a whole SweepInterval
	}
}
