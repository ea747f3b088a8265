// Package tcpproxy is a loopback TCP proxy for fault tests. It sits between
// a PostgreSQL client and its server and can cut every connection at once
// (Cut), stop forwarding bytes while the connections stay open (Stall), or
// cut one connection at a chosen query, such as COMMIT, just before or
// just after the server receives it (CutOnQuery), so a test can make a
// client lose a statement or lose only its answer.
//
// The proxy reads the PostgreSQL protocol (the client's startup packet,
// then the typed messages of both sides) to find queries and the end of
// their answers; it forwards every message unchanged. A connection that
// negotiates TLS or GSS encryption is forwarded as bytes and never matches
// a query.
package tcpproxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// When says where CutOnQuery cuts a connection.
type When int

const (
	// Before cuts the connection instead of forwarding the query: the
	// server never sees it.
	Before When = iota + 1
	// After forwards the query (for the extended protocol, everything up
	// to the Sync after its Execute) and the end of the client's input:
	// the server runs it to the end (a COMMIT commits, an autocommit
	// statement commits at the Sync). The proxy drops the server's answer
	// and cuts the client once the server has answered (ReadyForQuery), so
	// by the time the client sees the cut, the server is done.
	After
)

func (w When) String() string {
	switch w {
	case Before:
		return "Before"
	case After:
		return "After"
	}
	return fmt.Sprintf("When(%d)", int(w))
}

// Protocol codes of the untyped packets a client sends first.
const (
	codeCancel  = 80877102
	codeSSL     = 80877103
	codeGSSENC  = 80877104
	startupMax  = 10000   // bytes; PostgreSQL's own limit
	messageMax  = 1 << 30 // bytes; PostgreSQL's own limit
	drainMax    = 10 * time.Second
	dialTimeout = 5 * time.Second
)

// Proxy forwards loopback TCP connections to a target. It is safe for
// concurrent use. Start returns a running one; it stops when the test
// ends.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	links  map[*link]struct{}
	stall  chan struct{} // non-nil while stalled; closed when the stall ends
	traps  []*trap
	refuse bool // close new connections at once
	closed bool
	held   atomic.Int64 // writes waiting on a stall
	total  int
	stmts  atomic.Int64 // statements clients sent: simple queries and Executes
}

// Start listens on a free loopback port and forwards every connection to
// target ("host:port"). The proxy, and every connection through it, is
// closed when tb ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("tcpproxy: listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}}
	p.wg.Go(p.accept)
	tb.Cleanup(p.close)
	return p
}

// StartFor starts a proxy in front of the server of rawURL, a
// postgres:// connection string, and returns it with the same connection
// string pointed at the proxy.
func StartFor(tb testing.TB, rawURL string) (*Proxy, string) {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		tb.Fatalf("tcpproxy: %q is not a URL with a host", rawURL)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := Start(tb, target)
	u.Host = p.Addr()
	return p, u.String()
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Open reports how many connections are open through the proxy.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Accepted reports how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Cut closes every open connection now, both ways, as a network failure
// would; it returns how many it closed. Connections made afterwards are
// forwarded as usual.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.cut()
	}
	return len(p.links)
}

// Statements reports how many statements the clients have sent through
// the proxy so far: simple queries, and each Execute of the extended
// protocol (a prepared statement counts each time it runs).
func (p *Proxy) Statements() int { return int(p.stmts.Load()) }

// Held reports how many writes wait on a stall: bytes the proxy holds
// back, so what they carry has not reached the other side.
func (p *Proxy) Held() int { return int(p.held.Load()) }

// Refuse closes every open connection and every new one at once (on), as
// a server that went away would, or forwards them again (off).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
	if on {
		for l := range p.links {
			l.cut()
		}
	}
}

// Stall stops (on) or resumes (off) forwarding bytes in both directions on
// every connection, open or new. Stalled connections stay open: the bytes
// wait in the proxy and in the kernels' buffers, as on a network that
// stopped delivering.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.stall == nil:
		p.stall = make(chan struct{})
	case !on && p.stall != nil:
		close(p.stall)
		p.stall = nil
	}
}

// CutOnQuery arms a one-shot trap: the first query a client sends (a
// simple Query message, or the Parse message of an extended query) for
// which match returns true cuts that client's connection, as when says.
// The returned channel is closed once the client is cut. Traps are checked
// in the order they were armed; each fires once.
func (p *Proxy) CutOnQuery(match func(query string) bool, when When) <-chan struct{} {
	if when != Before && when != After {
		panic(fmt.Sprintf("tcpproxy: CutOnQuery: bad When %d", int(when)))
	}
	t := &trap{match: match, when: when, fired: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.traps = append(p.traps, t)
	return t.fired
}

// Query returns a matcher for CutOnQuery: true for a query that is text,
// ignoring case, surrounding white space and a trailing semicolon. lib/pq
// sends a transaction's commit as the simple query "COMMIT".
func Query(text string) func(string) bool {
	want := normalize(text)
	return func(q string) bool { return normalize(q) == want }
}

func normalize(q string) string {
	q = strings.TrimSpace(q)
	q = strings.TrimSpace(strings.TrimSuffix(q, ";"))
	return strings.ToUpper(q)
}

type trap struct {
	match func(string) bool
	when  When
	fired chan struct{}
}

// take removes and returns the first armed trap that matches q.
func (p *Proxy) take(q string) *trap {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, t := range p.traps {
		if t.match(q) {
			p.traps = append(p.traps[:i], p.traps[i+1:]...)
			return t
		}
	}
	return nil
}

// rearm puts back a trap whose connection ended before it could fire.
func (p *Proxy) rearm(t *trap) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.traps = append([]*trap{t}, p.traps...)
}

// wait blocks while the proxy is stalled, and reports false if l was cut
// meanwhile.
func (p *Proxy) wait(l *link) bool {
	for {
		p.mu.Lock()
		ch := p.stall
		p.mu.Unlock()
		if ch == nil {
			select {
			case <-l.done:
				return false
			default:
				return true
			}
		}
		p.held.Add(1)
		select {
		case <-ch:
			p.held.Add(-1)
		case <-l.done:
			p.held.Add(-1)
			return false
		}
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	for l := range p.links {
		l.cut()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.total++
		if p.refuse {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
		p.mu.Unlock()
	}
}

// link is one client connection and its connection to the target.
type link struct {
	client, server net.Conn
	done           chan struct{} // closed by cut
	once           sync.Once

	// A trap cutting after a query sets trap, then drain: from then on the
	// server's bytes are dropped, and its next ReadyForQuery (the end of
	// its answer to the query) cuts the client and fires trap.
	trap     *trap
	drain    atomic.Bool
	answered sync.Once
}

func (l *link) cut() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// answer cuts the client of a draining link and fires its trap.
func (l *link) answer() {
	l.answered.Do(func() {
		_ = l.client.Close()
		close(l.trap.fired)
	})
}

func (p *Proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.refuse {
		// Refuse may have cut the open links while this one was dialling.
		p.mu.Unlock()
		l.cut()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		l.cut()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()

	var back sync.WaitGroup
	defer back.Wait()
	var started atomic.Bool
	startBack := func(typed bool) {
		if started.CompareAndSwap(false, true) {
			back.Go(func() { p.serverToClient(l, typed) })
		}
	}
	// The server-to-client direction ends the link when the server closes;
	// this direction ends it when the client closes or a trap cuts it
	// before a query. A trap cutting after a query leaves the end to the
	// server.
	defer func() {
		if !l.drain.Load() {
			l.cut()
		}
	}()
	p.clientToServer(l, startBack)
}

// serverToClient copies the server's messages to the client (its bytes,
// when typed is false) until either side closes, and then ends the link.
func (p *Proxy) serverToClient(l *link, typed bool) {
	defer l.cut()
	defer func() {
		if l.drain.Load() {
			l.answer() // the server went away without answering
		}
	}()
	if !typed {
		buf := make([]byte, 32<<10)
		for {
			n, err := l.server.Read(buf)
			if n > 0 && !l.drain.Load() {
				if !p.wait(l) {
					return
				}
				if _, err := l.client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	r := bufio.NewReaderSize(l.server, 32<<10)
	var out []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if len(out) > 0 && !l.drain.Load() && p.wait(l) {
				_, _ = l.client.Write(out)
			}
			return
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n < 4 || n > messageMax {
			return // not the protocol we speak
		}
		msg := make([]byte, 1+n)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(r, msg[5:]); err != nil {
			return
		}
		if l.drain.Load() {
			out = out[:0]
			if hdr[0] == 'Z' {
				l.answer()
			}
			continue
		}
		out = append(out, msg...)
		if r.Buffered() > 0 {
			continue
		}
		if !p.wait(l) {
			return
		}
		if _, err := l.client.Write(out); err != nil && !l.drain.Load() {
			return
		}
		out = out[:0]
	}
}

// clientToServer forwards the client's startup packets, then its typed
// messages one at a time, checking queries against the traps.
func (p *Proxy) clientToServer(l *link, startBack func(typed bool)) {
	r := bufio.NewReaderSize(l.client, 32<<10)
	w := &forwarder{p: p, l: l}

	// Startup: untyped packets until the startup message proper.
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:4]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		if n < 8 || n > startupMax {
			startBack(false)
			w.raw(r, hdr[:4])
			return
		}
		pkt := make([]byte, n)
		copy(pkt, hdr[:4])
		if _, err := io.ReadFull(r, pkt[4:]); err != nil {
			return
		}
		if !w.send(pkt) {
			return
		}
		switch binary.BigEndian.Uint32(pkt[4:8]) {
		case codeSSL, codeGSSENC:
			// One byte answers: 'N' (go on in plain text) or an encrypted
			// session we cannot read.
			var answer [1]byte
			if _, err := io.ReadFull(l.server, answer[:]); err != nil {
				return
			}
			if !p.wait(l) {
				return
			}
			if _, err := l.client.Write(answer[:]); err != nil {
				return
			}
			if answer[0] != 'N' {
				startBack(false)
				w.raw(r, nil)
				return
			}
		case codeCancel:
			startBack(false)
			w.raw(r, nil)
			return
		default:
			startBack(true)
			w.messages(r)
			return
		}
	}
}

// forwarder writes the client's bytes to the server, honouring stalls.
type forwarder struct {
	p *Proxy
	l *link
}

func (w *forwarder) send(b []byte) bool {
	if !w.p.wait(w.l) {
		return false
	}
	_, err := w.l.server.Write(b)
	return err == nil
}

// raw copies the client's bytes as they come, after prefix.
func (w *forwarder) raw(r *bufio.Reader, prefix []byte) {
	if len(prefix) > 0 && !w.send(prefix) {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && !w.send(buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// messages forwards typed messages, batching those that arrived together
// into one write, and fires the traps.
func (w *forwarder) messages(r *bufio.Reader) {
	var (
		out      []byte
		pending  *trap // matched a Parse; cuts after its Execute's Sync
		executed bool
	)
	defer func() {
		if pending != nil {
			w.p.rearm(pending)
		}
	}()
	flush := func() bool {
		if len(out) == 0 {
			return true
		}
		ok := w.send(out)
		out = out[:0]
		return ok
	}
	fire := func(t *trap, after bool) {
		if !after {
			w.l.cut()
			close(t.fired) // once the client is cut, as CutOnQuery says
			return
		}
		w.l.trap = t
		w.l.drain.Store(true) // before the server can answer
		if !flush() {
			w.l.answer()
			w.l.cut()
			return
		}
		// The server reads the query, then the end of its input; the
		// server-to-client direction cuts the client at its answer.
		if tc, ok := w.l.server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		_ = w.l.server.SetReadDeadline(time.Now().Add(drainMax))
	}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			_ = flush()
			return
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n < 4 || n > messageMax {
			_ = flush()
			w.raw(r, hdr[:])
			return
		}
		msg := make([]byte, 1+n)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(r, msg[5:]); err != nil {
			_ = flush()
			return
		}
		body := msg[5:]
		if hdr[0] == 'Q' || hdr[0] == 'E' {
			w.p.stmts.Add(1)
		}
		switch hdr[0] {
		case 'Q':
			if t := w.p.take(cstring(body)); t != nil {
				if t.when == Before {
					_ = flush()
					fire(t, false)
					return
				}
				out = append(out, msg...)
				fire(t, true)
				return
			}
		case 'P':
			_, rest := cut(body) // statement name
			q, _ := cut(rest)
			if pending == nil {
				if t := w.p.take(q); t != nil {
					if t.when == Before {
						_ = flush()
						fire(t, false)
						return
					}
					pending, executed = t, false
				}
			}
		case 'E':
			executed = pending != nil
		case 'S':
			if pending != nil && executed {
				out = append(out, msg...)
				t := pending
				pending = nil
				fire(t, true)
				return
			}
		}
		out = append(out, msg...)
		if r.Buffered() == 0 && !flush() {
			return
		}
	}
}

// cut splits b at its first NUL: a C string and what follows.
func cut(b []byte) (string, []byte) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return string(b), nil
}

func cstring(b []byte) string {
	s, _ := cut(b)
	return s
}
