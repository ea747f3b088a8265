package notification

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/relay"
)

// Group commit (Config.GroupSize > 1): requests handed at the same time
// share one transaction. Whoever arrives while no group is forming leads
// the next one: it begins the transaction, takes every request waiting by
// then (up to GroupSize; the first one left over leads the group after),
// claims them all in one statement, and waits while each member delivers in
// its own goroutine and context. Then it releases the claims of those not
// delivered and commits once. Other relays block on the uncommitted
// claims, as on a single one, so one effect per consumer holds. What a
// group gives up: a commit that fails or loses its answer offers every
// delivered member again (Unsure), each with its own idempotency key.

// groupSlack is how long a group waits, past DeliveryTimeout, for a member
// whose delivery does not honour its context.
const groupSlack = 5 * time.Second

// member is one request in, or on its way into, a group.
type member struct {
	ctx   context.Context
	dl    delivery.Delivery
	p     job
	lead  chan struct{} // cap 1: form the next group
	group chan *group   // cap 1: the group it joined

	// Set by the group: claimed for the first time; then by the member:
	// its answer, and whether it came in time.
	first    bool
	out      delivery.Outcome
	reported bool
}

type group struct {
	members  []*member
	claimed  chan struct{} // closed once claims are taken or failed
	claimErr error

	mu        sync.Mutex
	sealed    bool // answers after this are too late
	pending   int
	allIn     chan struct{} // closed when the last member answered
	done      chan struct{} // closed once committed (or failed)
	commitErr error
}

// queue holds the requests waiting for a group.
type queue struct {
	mu      sync.Mutex
	waiting []*member
	forming bool
}

// join queues m and tells it to lead when no group is forming.
func (q *queue) join(m *member) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = append(q.waiting, m)
	if !q.forming {
		q.forming = true
		m.lead <- struct{}{}
	}
}

// take removes up to n waiting members for a group, and hands leadership
// of the next group to the first one left.
func (q *queue) take(n int) []*member {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := min(n, len(q.waiting))
	taken := q.waiting[:k:k]
	q.waiting = q.waiting[k:]
	if len(q.waiting) > 0 {
		q.waiting[0].lead <- struct{}{}
	} else {
		q.forming = false
	}
	return taken
}

// grouped delivers p as a member of a group.
func (d *Dispatcher) grouped(ctx context.Context, dl delivery.Delivery, p job) relay.Result {
	m := &member{ctx: ctx, dl: dl, p: p, lead: make(chan struct{}, 1), group: make(chan *group, 1)}
	d.queue.join(m)
	select {
	case <-m.lead:
		return d.lead(m)
	case g := <-m.group:
		return d.participate(g, m)
	}
}

// lead forms a group, takes its claims, delivers its own request with the
// others, and commits.
func (d *Dispatcher) lead(self *member) relay.Result {
	// The claims' transaction serves the whole group: it must not end
	// with this member's context.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(self.ctx), d.deliveryTimeout()+2*groupSlack)
	defer cancel()
	tx, beginErr := d.db.BeginTx(ctx, claimTx)
	if beginErr == nil {
		defer func() { _ = tx.Rollback() }()
	}
	// Those who arrived while the transaction began join this group.
	runtime.Gosched()
	g := &group{members: d.queue.take(d.cfg.GroupSize), claimed: make(chan struct{}),
		allIn: make(chan struct{}), done: make(chan struct{})}
	g.pending = len(g.members)
	for _, m := range g.members {
		if m != self {
			m.group <- g
		}
	}

	g.claimErr = beginErr
	if beginErr == nil {
		ids := make([]uuid.UUID, len(g.members))
		for i, m := range g.members {
			ids[i] = m.p.ID
		}
		first, err := d.inbox.OnceBatch(ctx, tx, d.cfg.Consumer, ids)
		g.claimErr = err
		for _, m := range g.members {
			m.first = first[m.p.ID]
		}
	}
	close(g.claimed)

	d.deliverIn(g, self)
	g.commitErr = d.finish(ctx, g, tx)
	d.log.DebugContext(ctx, "group committed", "requests", len(g.members), "err", g.commitErr)
	close(g.done)
	return d.groupResult(g, self)
}

// participate delivers a member's request once its group holds the claims,
// and answers once the group committed.
func (d *Dispatcher) participate(g *group, m *member) relay.Result {
	d.deliverIn(g, m)
	<-g.done
	return d.groupResult(g, m)
}

// deliverIn runs m's delivery once the claims are taken, and reports.
func (d *Dispatcher) deliverIn(g *group, m *member) {
	<-g.claimed
	if g.claimErr == nil && m.first {
		m.out = d.deliver(m.ctx, m.dl, m.p)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sealed {
		return
	}
	m.reported = true
	g.pending--
	if g.pending == 0 {
		close(g.allIn)
	}
}

// finish waits for the members' answers (no longer than a delivery may
// take), releases the claims of those not delivered and commits.
func (d *Dispatcher) finish(ctx context.Context, g *group, tx *sql.Tx) error {
	if g.claimErr != nil {
		return g.claimErr
	}
	wait := time.NewTimer(d.deliveryTimeout() + groupSlack)
	defer wait.Stop()
	select {
	case <-g.allIn:
	case <-wait.C:
	}
	g.mu.Lock()
	g.sealed = true // a straggler's answer now comes too late to count
	g.mu.Unlock()

	var release []uuid.UUID
	for _, m := range g.members {
		if m.first && !(m.reported && m.out.Kind() == delivery.KindDelivered) {
			release = append(release, m.p.ID)
		}
	}
	if len(release) > 0 {
		if err := d.inbox.Release(ctx, tx, d.cfg.Consumer, release); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// groupResult is m's answer once its group is done.
func (d *Dispatcher) groupResult(g *group, m *member) relay.Result {
	switch {
	case g.claimErr != nil:
		return d.unsure(m.ctx, m.p, fmt.Errorf("claim a group of %d: %w", len(g.members), g.claimErr))
	case !m.first:
		d.log.DebugContext(m.ctx, "already delivered", "outbox_id", m.p.ID)
		return relay.Done()
	case !m.reported:
		return d.unsure(m.ctx, m.p, errors.New("delivery answered after its group had committed without it"))
	}
	return d.answer(m.ctx, m.p, m.out, g.commitErr)
}
