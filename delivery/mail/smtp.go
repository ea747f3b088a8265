package mail

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// quitTimeout bounds the QUIT that ends a connection.
const quitTimeout = 2 * time.Second

// send hands msg to the server for rcpt, and returns the text of the
// server's reply to the end of DATA. An error is a reason (see failure): a
// *ReplyError when the server answered with a failure.
//
// It sends on a connection the pool kept, if any, and else on a new one,
// which it gives the pool after an accepted message. A kept connection
// that the server closed while it was idle fails at MAIL FROM, before any
// of the message is sent: the message then goes on a new connection.
//
// The exchange is bounded by ctx and s.timeout: the connection is closed
// as soon as the earlier of the two ends, which unblocks any read or
// write.
func (d *Delivery) send(ctx context.Context, rcpt string, msg []byte) (string, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, d.s.timeout, &timeoutError{timeout: d.s.timeout.String()})
	defer cancel()
	if ctx.Err() != nil {
		// A kept connection would be closed for nothing.
		return "", failure(ctx, "connect", ctx.Err())
	}

	if sess := d.pool.get(); sess != nil {
		reply, err := d.sendOn(ctx, sess, rcpt, msg)
		if !errors.Is(err, errStale) {
			return reply, err
		}
	}
	sess, err := d.s.open(ctx)
	if err != nil {
		return "", err
	}
	return d.sendOn(ctx, sess, rcpt, msg)
}

// sendOn sends msg on sess for ctx, then gives sess back to the pool, or
// closes it after a failure.
func (d *Delivery) sendOn(ctx context.Context, sess *session, rcpt string, msg []byte) (string, error) {
	sess.bind(ctx)
	reply, err := sess.transact(ctx, envelope(d.s.from.Address), rcpt, msg)
	if !sess.unbind() || err != nil {
		_ = sess.raw.Close()
		return "", err
	}
	d.pool.put(sess)
	return reply, nil
}

// errStale says that the server closed a kept connection: it failed at
// MAIL FROM, and no part of the message went out.
var errStale = errors.New("mail: the server closed the kept connection")

// session is one connection to the server: greeted, encrypted as the
// Config says, and authenticated when it has credentials. One goroutine
// uses it at a time.
type session struct {
	raw     net.Conn // the TCP connection, under any TLS
	conn    *conn    // what the client speaks on
	client  *smtp.Client
	tls     bool        // whether the client speaks TLS
	opened  time.Time   // when it was dialled
	used    bool        // whether the server took a MAIL FROM on it
	unbind  func() bool // ends bind
	kept    int         // how many times the pool kept it
	expired *time.Timer // closes it while the pool keeps it idle
}

// open dials the server and readies a session, closing its connection
// should ctx end on the way.
func (s *settings) open(ctx context.Context) (*session, error) {
	var dialer net.Dialer
	raw, err := dialer.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, failure(ctx, "connect", err)
	}
	sess := &session{raw: raw, conn: &conn{Conn: raw, step: "greeting"}, opened: time.Now()}
	sess.bind(ctx)
	if err := s.hello(ctx, sess); err != nil {
		sess.unbind()
		_ = raw.Close()
		return nil, err
	}
	if err := s.auth(ctx, sess); err != nil {
		sess.unbind()
		_ = raw.Close()
		return nil, err
	}
	sess.unbind()
	return sess, nil
}

// hello greets the server, upgrading the connection to TLS as the Config
// says, and leaves sess with a client that has said EHLO as s.hostname.
func (s *settings) hello(ctx context.Context, sess *session) error {
	loopback := isLoopbackAddr(sess.raw.RemoteAddr())
	switch {
	case s.tlsMode == TLSImplicit:
		tc := tls.Client(sess.raw, s.tlsConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			return failure(ctx, "TLS handshake", err)
		}
		sess.conn.Conn = tc
		sess.client = smtp.NewClient(sess.conn)
	case s.tlsMode == TLSRequired || s.tlsMode == TLSDefault && !loopback:
		c, err := smtp.NewClientStartTLS(sess.conn, s.tlsConfig)
		if err != nil {
			if sess.conn.step != "STARTTLS" && ctx.Err() == nil && !isReply(err) && !isTransport(err) {
				// The one error the client makes itself before it
				// writes STARTTLS: the server's EHLO did not offer it.
				return ErrNoStartTLS
			}
			return failure(ctx, sess.conn.step, err)
		}
		sess.client = c
		// The server forgets what was said in the clear (RFC 3207), and
		// the client said EHLO as "localhost" there: this EHLO, the
		// first over TLS, names this client and shakes hands.
		if err := c.Hello(s.hostname); err != nil {
			step := "STARTTLS"
			if isReply(err) {
				step = "EHLO"
			}
			return failure(ctx, step, err)
		}
		sess.tls = true
		return nil
	default:
		sess.client = smtp.NewClient(sess.conn)
	}
	if err := sess.client.Hello(s.hostname); err != nil {
		return failure(ctx, sess.conn.step, err)
	}
	sess.tls = s.tlsMode == TLSImplicit
	return nil
}

// auth authenticates sess when the Config has credentials, which it
// sends only over TLS or to a loopback address.
func (s *settings) auth(ctx context.Context, sess *session) error {
	if s.username == "" {
		return nil
	}
	if !sess.tls && !isLoopbackAddr(sess.raw.RemoteAddr()) {
		return ErrCleartextAuth
	}
	mechanism, err := s.mechanism(ctx, sess.client)
	if err != nil {
		return err
	}
	if err := sess.client.Auth(mechanism); err != nil {
		return failure(ctx, "AUTH", err)
	}
	return nil
}

// mechanism chooses how to authenticate from what the server offers:
// XOAUTH2 with a token from TokenFunc; or with the password PLAIN, or
// LOGIN when the server has no PLAIN.
func (s *settings) mechanism(ctx context.Context, c *smtp.Client) (sasl.Client, error) {
	switch {
	case s.tokenFunc != nil:
		if !c.SupportsAuth(xoauth2Name) {
			return nil, ErrNoAuthMechanism
		}
		token, err := s.tokenFunc(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, failure(ctx, "AUTH", err)
			}
			return nil, &reasonError{msg: "mail: AUTH: Config.TokenFunc failed", err: err}
		}
		return &xoauth2{username: s.username, token: token}, nil
	case c.SupportsAuth(sasl.Plain):
		return sasl.NewPlainClient("", s.username, s.password), nil
	case c.SupportsAuth(sasl.Login):
		return sasl.NewLoginClient(s.username, s.password), nil
	default:
		return nil, ErrNoAuthMechanism
	}
}

// xoauth2Name is the name of the XOAUTH2 mechanism.
const xoauth2Name = "XOAUTH2"

// xoauth2 is the XOAUTH2 mechanism of Gmail and Microsoft 365: the
// mailbox and an OAuth2 access token in the initial response. A server
// that refuses the token sends a challenge that explains why, in JSON,
// and its failure reply after the client's empty response.
type xoauth2 struct {
	username, token string
	challenged      bool
}

func (a *xoauth2) Start() (string, []byte, error) {
	return xoauth2Name, []byte("user=" + a.username + "\x01auth=Bearer " + a.token + "\x01\x01"), nil
}

func (a *xoauth2) Next([]byte) ([]byte, error) {
	if a.challenged {
		return nil, sasl.ErrUnexpectedServerChallenge
	}
	a.challenged = true
	return []byte{}, nil // not nil: an empty response is still sent
}

// bind closes the session's connection when ctx ends, until unbind.
func (sess *session) bind(ctx context.Context) {
	raw := sess.raw
	sess.unbind = context.AfterFunc(ctx, func() { _ = raw.Close() })
}

// transact hands msg to the server, from from to rcpt, and returns the
// text of the server's reply to the end of DATA. On a connection that
// carried a message before, a failure of MAIL FROM to reach the server or
// a 421 (the server is closing the connection) is errStale.
func (sess *session) transact(ctx context.Context, from, rcpt string, msg []byte) (string, error) {
	var opts *smtp.MailOptions
	if utf8, _ := sess.client.Extension("SMTPUTF8"); utf8 && !isASCII(from+rcpt) {
		// An address in UTF-8 needs the server's SMTPUTF8 (RFC 6531);
		// to a server without it, it goes as it is, and the server
		// decides.
		opts = &smtp.MailOptions{UTF8: true}
	}
	if err := sess.client.Mail(from, opts); err != nil {
		if sess.used && ctx.Err() == nil && (isTransport(err) || isClosing(err)) {
			return "", errStale
		}
		return "", failure(ctx, "MAIL FROM", err)
	}
	sess.used = true
	if err := sess.client.Rcpt(rcpt, nil); err != nil {
		return "", failure(ctx, "RCPT TO", err)
	}
	w, err := sess.client.Data()
	if err != nil {
		return "", failure(ctx, "DATA", err)
	}
	if _, err := w.Write(msg); err != nil {
		return "", failure(ctx, "DATA", err)
	}
	resp, err := w.CloseWithResponse()
	if err != nil {
		return "", failure(ctx, "DATA", err)
	}
	return resp.StatusText, nil
}

// quit says QUIT and closes the connection. No message is under way: a
// failed QUIT changes nothing, and a slow one must not hold a request (and
// its transaction).
func (sess *session) quit() {
	sess.client.CommandTimeout = quitTimeout
	_ = sess.client.Quit()
	_ = sess.raw.Close()
}

// conn is the connection the SMTP client speaks on: the TCP connection,
// or the TLS one over it for TLSImplicit (for STARTTLS the client puts TLS
// over conn). It remembers the last command the client wrote in the
// clear, so that a failure before TLS names the step it belongs to.
type conn struct {
	net.Conn
	step string // "greeting", then "EHLO" or "STARTTLS" once written
}

// Write writes b, noting EHLO, HELO and STARTTLS. The client writes each
// command in one call; over TLS conn sees records, which never begin with
// a command's name.
func (c *conn) Write(b []byte) (int, error) {
	switch {
	case bytes.HasPrefix(b, []byte("EHLO ")), bytes.HasPrefix(b, []byte("HELO ")):
		c.step = "EHLO"
	case bytes.HasPrefix(b, []byte("STARTTLS\r\n")):
		c.step = "STARTTLS"
	}
	return c.Conn.Write(b)
}

// isReply reports whether err is the server's answer.
func isReply(err error) bool {
	_, ok := errors.AsType[*smtp.SMTPError](err)
	return ok
}

// isClosing reports whether err is a 421 reply: the server is closing the
// connection.
func isClosing(err error) bool {
	se, ok := errors.AsType[*smtp.SMTPError](err)
	return ok && se.Code == 421
}

// isTransport reports whether err is a failure to read or write the
// connection, or to make sense of what was read.
func isTransport(err error) bool {
	_, ok := errors.AsType[net.Error](err)
	return ok || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isMalformed(err)
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// isLoopbackAddr reports whether addr is a loopback TCP address.
func isLoopbackAddr(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
