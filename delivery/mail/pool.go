package mail

import (
	"slices"
	"sync"
	"time"
)

// maxSessionAge is how long a connection may be kept for reuse after it
// was dialled. Past it, the connection is closed after its message, so
// that no connection outlives its authentication by much: an OAuth2
// token lasts an hour, and Postfix gives up reusing a connection after 5
// minutes (smtp_connection_reuse_time_limit).
const maxSessionAge = 5 * time.Minute

// pool keeps connections between deliveries: at most max idle ones, each
// closed when idle for timeout, none older than maxAge. It is safe for
// concurrent use.
type pool struct {
	max     int
	timeout time.Duration
	maxAge  time.Duration

	mu     sync.Mutex
	idle   []*session // the most recently used last
	closed bool
	quits  sync.WaitGroup // the idle connections being closed by their timers
}

// get takes the idle connection used last, or returns nil when there is
// none.
func (p *pool) get() *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == 0 {
		return nil
	}
	sess := p.idle[len(p.idle)-1]
	p.idle = p.idle[:len(p.idle)-1]
	// Should the timer have fired already, expire finds sess gone, or
	// kept again with another timer, and leaves it alone.
	sess.expired.Stop()
	return sess
}

// put keeps sess, which just carried a message, for the next delivery,
// or says QUIT when the pool is full or closed or sess is too old.
func (p *pool) put(sess *session) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.max || time.Since(sess.opened) > p.maxAge {
		p.mu.Unlock()
		sess.quit()
		return
	}
	p.idle = append(p.idle, sess)
	sess.kept++
	kept := sess.kept
	sess.expired = time.AfterFunc(p.timeout, func() { p.expire(sess, kept) })
	p.mu.Unlock()
}

// expire closes sess, idle for p.timeout since the pool kept it for the
// kept-th time, unless get took it since.
func (p *pool) expire(sess *session, kept int) {
	p.mu.Lock()
	i := slices.Index(p.idle, sess)
	if i < 0 || sess.kept != kept {
		p.mu.Unlock()
		return
	}
	p.idle = slices.Delete(p.idle, i, i+1)
	p.quits.Add(1)
	p.mu.Unlock()
	defer p.quits.Done()
	sess.quit()
}

// close closes the idle connections, waits for those that timers are
// closing, and keeps none from then on.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, sess := range idle {
		sess.expired.Stop()
		sess.quit()
	}
	p.quits.Wait()
}
