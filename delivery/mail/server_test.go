package mail_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"
)

// The phases at which a testServer can be told to fail or stall.
const (
	phaseEHLO = "EHLO"
	phaseMail = "MAIL"
	phaseRcpt = "RCPT"
	phaseData = "DATA"
)

// received is one message that reached a testServer's DATA.
type received struct {
	From     string   // the envelope sender
	To       []string // the envelope recipients
	Data     []byte   // the message, as the client sent it after DATA
	TLS      bool     // whether the connection was TLS
	Username string   // who authenticated, "" when nobody did
	Accepted bool     // whether the server answered 250
	UTF8     bool     // whether MAIL FROM said SMTPUTF8
}

// serverOptions configures a testServer.
type serverOptions struct {
	// listen is where to listen: "127.0.0.1:0" when empty.
	listen string
	// username, when set, is required: the server offers AUTH with
	// mechanisms and refuses MAIL before it. PLAIN and LOGIN take
	// username and password, XOAUTH2 username and a token that tokenOK
	// accepts.
	username, password string
	// mechanisms are the AUTH mechanisms the server offers, in order:
	// sasl.Plain, sasl.Login or "XOAUTH2". Empty means PLAIN alone.
	mechanisms []string
	// tokenOK says whether an XOAUTH2 token is good; nil refuses them all.
	tokenOK func(token string) bool
	// startTLS makes the server offer STARTTLS with testCertificate.
	startTLS bool
	// implicitTLS makes the server speak TLS from the first byte.
	implicitTLS bool
	// dataReply is the text of the server's 250 after DATA; empty means
	// go-smtp's "OK: queued".
	dataReply string
	// smtpUTF8 makes the server offer SMTPUTF8.
	smtpUTF8 bool
	// perConnection, when positive, is how many messages the server takes
	// on one connection: it answers the next MAIL with 421, as servers
	// that limit them do.
	perConnection int
}

// testServer is a real SMTP server (emersion/go-smtp) on a loopback port
// that records every message, and that can be told to fail or stall at a
// phase. It stops when the test ends.
type testServer struct {
	opts serverOptions
	addr string
	lis  *recordingListener

	// stall is closed when the test ends: a stalled phase waits for it.
	stall chan struct{}
	// stalled receives a value each time a phase starts stalling.
	stalled chan string

	mu         sync.Mutex
	messages   []received
	auths      []authAttempt
	failPhase  string
	failErr    *smtp.SMTPError
	stallPhase string
	release    chan struct{} // closed to end a stall before the test ends
	open       int           // sessions open now
	opened     chan struct{} // closed and replaced when open changes
}

// startServer starts a testServer for t.
func startServer(t testing.TB, opts serverOptions) *testServer {
	t.Helper()
	if opts.listen == "" {
		opts.listen = "127.0.0.1:0"
	}
	inner, err := net.Listen("tcp", opts.listen)
	require.NoError(t, err)
	lis := &recordingListener{Listener: inner, changed: make(chan struct{})}

	srv := &testServer{
		opts:    opts,
		addr:    inner.Addr().String(),
		lis:     lis,
		stall:   make(chan struct{}),
		stalled: make(chan string, 16),
		opened:  make(chan struct{}),
	}
	s := smtp.NewServer(smtp.BackendFunc(srv.newSession))
	s.Domain = "mx.test"
	s.AllowInsecureAuth = true // on loopback, as the client allows
	s.EnableSMTPUTF8 = opts.smtpUTF8
	s.ErrorLog = log.New(io.Discard, "", 0)
	s.ReadTimeout = 10 * time.Second // a safety net, never reached by a passing test
	s.WriteTimeout = 10 * time.Second
	if opts.startTLS || opts.implicitTLS {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{testCertificate().cert}}
	}
	var l net.Listener = lis
	if opts.implicitTLS {
		l = tls.NewListener(lis, s.TLSConfig)
	}

	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		_ = s.Serve(l)
	}()
	t.Cleanup(func() {
		close(srv.stall)
		// Serve returns before Shutdown starts: Serve counts every
		// connection it accepts in a WaitGroup that Shutdown waits on,
		// and counting during the wait is a race.
		_ = lis.Close()
		<-serveDone
		// Shutdown waits for every connection's goroutine. Its other
		// error is closing the listener again.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a client still had a connection open to the test server 5s after the test")
		}
	})
	return srv
}

// failAt makes the server answer every later command of phase with code,
// enhanced and text.
func (s *testServer) failAt(phase string, code int, enhanced smtp.EnhancedCode, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failPhase = phase
	s.failErr = &smtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: text}
}

// succeed makes the server answer as it does by default again, after
// failAt.
func (s *testServer) succeed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failPhase, s.failErr = "", nil
}

// stallAt makes the server stall at phase until the test ends, sending
// the phase to s.stalled when it starts.
func (s *testServer) stallAt(phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stallPhase, s.release = phase, nil
}

// whenStalled makes the server stall at phase, and calls f once a
// session stalls there, unless the test ends first.
func (s *testServer) whenStalled(t testing.TB, phase string, f func()) {
	s.stallAt(phase)
	go func() {
		select {
		case <-s.stalled:
			f()
		case <-t.Context().Done():
		}
	}()
}

// holdAt is stallAt until release is called, which lets every session
// held at phase go on, and no later one stall.
func (s *testServer) holdAt(phase string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.stallPhase, s.release = phase, ch
	return func() {
		s.mu.Lock()
		s.stallPhase = ""
		s.mu.Unlock()
		close(ch)
	}
}

// at is called when a session reaches phase: it stalls or fails as told.
func (s *testServer) at(phase string) error {
	s.mu.Lock()
	stall := s.stallPhase == phase
	release := s.release
	var err error
	if s.failPhase == phase {
		err = s.failErr
	}
	s.mu.Unlock()
	if stall {
		select {
		case s.stalled <- phase:
		default:
		}
		select {
		case <-release:
		case <-s.stall:
			return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Shutting down"}
		}
	}
	return err
}

// closeConnections closes the server's end of every connection it
// accepted, as a server does with connections idle for too long.
func (s *testServer) closeConnections() {
	s.lis.closeAll()
}

// sessionOpened counts a session in, or out when delta is -1.
func (s *testServer) sessionOpened(delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open += delta
	close(s.opened)
	s.opened = make(chan struct{})
}

// waitOpen waits until the server has n sessions open: connections that
// said EHLO and have not ended.
func (s *testServer) waitOpen(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for {
		s.mu.Lock()
		open, opened := s.open, s.opened
		s.mu.Unlock()
		if open == n {
			return
		}
		select {
		case <-opened:
		case <-ctx.Done():
			require.FailNowf(t, "sessions open", "waited 5s for the server to have %d sessions open; it has %d", n, open)
		}
	}
}

// received returns the messages that reached DATA so far.
func (s *testServer) received() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages)
}

// authAttempt is one AUTH command a testServer answered.
type authAttempt struct {
	Mechanism string
	Secret    string // the password or the token; "" when none came
	OK        bool   // whether the server accepted it
}

// authAttempts returns every AUTH command so far, in order.
func (s *testServer) authAttempts() []authAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.auths)
}

// accepted returns the messages the server answered 250 to.
func (s *testServer) accepted() []received {
	var out []received
	for _, m := range s.received() {
		if m.Accepted {
			out = append(out, m)
		}
	}
	return out
}

// connections returns how many connections the server accepted, other
// than its own probe. It dials a probe and waits until the server accepted
// it: connections are accepted in order, so any connection a client made
// before is counted.
func (s *testServer) connections(t testing.TB) int {
	t.Helper()
	var d net.Dialer
	probe, err := d.DialContext(t.Context(), "tcp", s.addr)
	require.NoError(t, err)
	defer func() { _ = probe.Close() }()
	n, err := s.lis.waitFor(t.Context(), probe.LocalAddr().String())
	require.NoError(t, err)
	return n - 1
}

func (s *testServer) newSession(c *smtp.Conn) (smtp.Session, error) {
	if err := s.at(phaseEHLO); err != nil {
		return nil, err
	}
	_, isTLS := c.TLSConnectionState()
	s.sessionOpened(1)
	return &session{srv: s, tls: isTLS}, nil
}

// session is one SMTP session of a testServer.
type session struct {
	srv      *testServer
	tls      bool
	username string
	from     string
	utf8     bool
	to       []string
	messages int // accepted on this connection
}

var _ smtp.AuthSession = (*session)(nil)

func (s *session) AuthMechanisms() []string {
	switch {
	case s.srv.opts.username == "":
		return nil
	case len(s.srv.opts.mechanisms) == 0:
		return []string{sasl.Plain}
	default:
		return s.srv.opts.mechanisms
	}
}

func (s *session) Auth(mech string) (sasl.Server, error) {
	if !slices.Contains(s.AuthMechanisms(), mech) {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	// check records the attempt, and accepts it when ok.
	check := func(username, secret string, ok bool) error {
		ok = ok && username == s.srv.opts.username
		s.srv.mu.Lock()
		s.srv.auths = append(s.srv.auths, authAttempt{Mechanism: mech, Secret: secret, OK: ok})
		s.srv.mu.Unlock()
		if !ok {
			return smtp.ErrAuthFailed
		}
		s.username = username
		return nil
	}
	switch mech {
	case sasl.Plain:
		return sasl.NewPlainServer(func(_, username, password string) error {
			return check(username, password, password == s.srv.opts.password)
		}), nil
	case sasl.Login:
		return &loginServer{check: func(username, password string) error {
			return check(username, password, password == s.srv.opts.password)
		}}, nil
	default:
		return &xoauth2Server{check: func(username, token string) error {
			return check(username, token, s.srv.opts.tokenOK != nil && s.srv.opts.tokenOK(token))
		}}, nil
	}
}

func (s *session) Mail(from string, opts *smtp.MailOptions) error {
	if s.srv.opts.username != "" && s.username == "" {
		return smtp.ErrAuthRequired
	}
	if err := s.srv.at(phaseMail); err != nil {
		return err
	}
	if n := s.srv.opts.perConnection; n > 0 && s.messages >= n {
		return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "Too many messages on this connection"}
	}
	s.from, s.utf8 = from, opts.UTF8
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if err := s.srv.at(phaseRcpt); err != nil {
		return err
	}
	s.to = append(s.to, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	err = s.srv.at(phaseData)
	if err == nil && s.srv.opts.dataReply != "" {
		err = &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: s.srv.opts.dataReply}
	}
	var serr *smtp.SMTPError
	accepted := err == nil || errors.As(err, &serr) && serr.Code == 250
	s.srv.mu.Lock()
	s.srv.messages = append(s.srv.messages, received{
		From: s.from, To: slices.Clone(s.to), Data: data, TLS: s.tls, Username: s.username, Accepted: accepted, UTF8: s.utf8,
	})
	s.srv.mu.Unlock()
	if accepted {
		s.messages++
	}
	return err
}

func (s *session) Reset() {
	s.from, s.utf8, s.to = "", false, nil
}

func (s *session) Logout() error {
	s.srv.sessionOpened(-1)
	return nil
}

// loginServer is the server side of AUTH LOGIN, which go-sasl no longer
// has: it asks for the username unless the client sent it with the
// command, then for the password.
type loginServer struct {
	check    func(username, password string) error
	username *string
}

func (a *loginServer) Next(response []byte) ([]byte, bool, error) {
	switch {
	case a.username == nil && response == nil:
		return []byte("Username:"), false, nil
	case a.username == nil:
		username := string(response)
		a.username = &username
		return []byte("Password:"), false, nil
	default:
		return nil, true, a.check(*a.username, string(response))
	}
}

// xoauth2Server is the server side of AUTH XOAUTH2 as Gmail speaks it: a
// token it refuses gets a challenge that says why, in JSON, and the
// failure after the client's empty response.
type xoauth2Server struct {
	check   func(username, token string) error
	refused error // the failure to send after the challenge
}

func (a *xoauth2Server) Next(response []byte) ([]byte, bool, error) {
	switch {
	case a.refused != nil:
		if len(response) != 0 {
			return nil, true, errors.New("a response to the error challenge that is not empty")
		}
		return nil, true, a.refused
	case response == nil:
		return []byte{}, false, nil // ask for the initial response
	}
	user, rest, ok1 := strings.Cut(string(response), "\x01auth=Bearer ")
	token, ok2 := strings.CutSuffix(rest, "\x01\x01")
	username, ok3 := strings.CutPrefix(user, "user=")
	if !ok1 || !ok2 || !ok3 {
		return nil, true, errors.New("not an XOAUTH2 initial response")
	}
	if err := a.check(username, token); err != nil {
		a.refused = err
		return []byte(`{"status":"401","schemes":"bearer","scope":"https://mail.google.com/"}`), false, nil
	}
	return nil, true, nil
}

// recordingListener records every connection it accepts.
type recordingListener struct {
	net.Listener

	mu      sync.Mutex
	conns   []net.Conn
	remotes []string
	changed chan struct{} // closed and replaced on every accept
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.remotes = append(l.remotes, c.RemoteAddr().String())
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return c, nil
}

// closeAll closes every connection the listener accepted.
func (l *recordingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
}

// waitFor waits until the listener accepted a connection from remote, and
// returns how many it had accepted then.
func (l *recordingListener) waitFor(ctx context.Context, remote string) (int, error) {
	for {
		l.mu.Lock()
		if slices.Contains(l.remotes, remote) {
			n := len(l.remotes)
			l.mu.Unlock()
			return n, nil
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// certificate is a self-signed certificate for 127.0.0.1, and a pool that
// trusts it.
type certificate struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// testCertificate returns the test binary's one certificate.
var testCertificate = sync.OnceValue(func() certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mx.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(parsed)
	return certificate{
		cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: parsed},
		pool: pool,
	}
})
