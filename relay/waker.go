package relay

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tidings-go/tidings/internal/pgarray"
)

// wakeTimeout bounds one wake-up's NOTIFY.
const wakeTimeout = 5 * time.Second

// Waker wakes relays after the writers' commits instead of inside them.
//
// A NOTIFY in the staging transaction takes a database-wide lock at commit
// and holds it through the commit's WAL flush, so concurrent writers that
// stage commit one at a time. Writers that stage through an Outbox's
// WithoutWakeUp and call Wake once their commit has returned keep their
// commits concurrent: one session sends the wake-ups, and every Wake that
// arrives while a NOTIFY is in flight shares the next one. BENCHMARKS.md
// has the figures.
//
// A wake-up is a hint. One that is lost (Wake not called, the NOTIFY
// failing, the process exiting first) delays its records until the relay's
// sweep; it never loses them.
type Waker struct {
	db      *sql.DB
	ob      *Outbox
	poke    chan struct{} // cap 1
	quit    chan struct{} // closed by Close
	stopped chan struct{}
	once    sync.Once

	mu      sync.Mutex
	pending map[string]struct{} // modules to wake
	err     error               // the first NOTIFY that failed
}

// NewWaker starts a waker for the outbox's relays that sends its wake-ups
// through db. Close stops it.
func (o *Outbox) NewWaker(db *sql.DB) *Waker {
	w := &Waker{db: db, ob: o, poke: make(chan struct{}, 1), quit: make(chan struct{}),
		stopped: make(chan struct{}), pending: map[string]struct{}{}}
	go w.run()
	return w
}

// Wake asks for a wake-up of module's relays. Call it after the commit of
// a transaction that staged records of module; it never blocks. A Wake
// after Close is lost (to the sweep).
func (w *Waker) Wake(module string) {
	w.mu.Lock()
	w.pending[module] = struct{}{}
	w.mu.Unlock()
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Close sends the wake-ups still pending, stops the waker and returns the
// first NOTIFY that failed, if any.
func (w *Waker) Close() error {
	w.once.Do(func() { close(w.quit) })
	<-w.stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Waker) run() {
	defer close(w.stopped)
	for {
		select {
		case <-w.poke:
			w.send()
		case <-w.quit:
			w.send()
			return
		}
	}
}

// send notifies every module woken since the last send, in one statement
// outside any writer's transaction.
func (w *Waker) send() {
	w.mu.Lock()
	modules := slices.Collect(maps.Keys(w.pending))
	clear(w.pending)
	w.mu.Unlock()
	if len(modules) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	_, err := w.db.ExecContext(ctx, w.ob.q.notify, w.ob.q.channel, pgarray.Of(modules))
	w.mu.Lock()
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("relay: wake %v: %w", modules, err)
	}
	w.mu.Unlock()
}
