package mail

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/smtp"
	"slices"
	"strings"
	"time"
)

// quitTimeout bounds the QUIT that follows an accepted message.
const quitTimeout = 2 * time.Second

// send runs one SMTP exchange that hands msg to the server for rcpt, and
// returns the text of the server's reply to the end of DATA. An error is a
// reason (see failure): a *ReplyError when the server answered with a
// failure.
//
// The exchange is bounded by ctx and s.timeout: the connection's deadline
// is the earlier of the two, and the connection is closed as soon as ctx
// ends, which unblocks any read or write.
func (s *settings) send(ctx context.Context, rcpt string, msg []byte) (string, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, &timeoutError{timeout: s.timeout.String()})
	defer cancel()

	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return "", failure(ctx, "connect", err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return "", failure(ctx, "connect", err)
		}
	}
	loopback := isLoopbackAddr(conn.RemoteAddr())

	var nc net.Conn = conn
	if s.tlsMode == TLSImplicit {
		tc := tls.Client(conn, s.tlsConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			return "", failure(ctx, "TLS handshake", err)
		}
		nc = tc
	}

	c, err := smtp.NewClient(nc, s.host)
	if err != nil {
		return "", failure(ctx, "greeting", err)
	}
	defer func() { _ = c.Close() }()
	if err := c.Hello(s.hostname); err != nil {
		return "", failure(ctx, "EHLO", err)
	}

	if s.tlsMode == TLSRequired || s.tlsMode == TLSDefault && !loopback {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return "", ErrNoStartTLS
		}
		if err := c.StartTLS(s.tlsConfig); err != nil {
			return "", failure(ctx, "STARTTLS", err)
		}
	}

	if s.username != "" {
		if _, isTLS := c.TLSConnectionState(); !isTLS && !loopback {
			return "", ErrCleartextAuth
		}
		ok, mechs := c.Extension("AUTH")
		if !ok || !slices.ContainsFunc(strings.Fields(mechs), func(m string) bool { return strings.EqualFold(m, "PLAIN") }) {
			return "", ErrNoAuthPlain
		}
		if err := c.Auth(plainAuth{username: s.username, password: s.password}); err != nil {
			return "", failure(ctx, "AUTH", err)
		}
	}

	if err := c.Mail(s.from.Address); err != nil {
		return "", failure(ctx, "MAIL FROM", err)
	}
	if err := c.Rcpt(rcpt); err != nil {
		return "", failure(ctx, "RCPT TO", err)
	}
	reply, err := data(c, msg)
	if err != nil {
		return "", failure(ctx, "DATA", err)
	}
	// The server has the message: a failed QUIT changes nothing, and a
	// slow one must not hold the request (and its transaction) until the
	// deadline.
	if deadline, ok := ctx.Deadline(); !ok || time.Until(deadline) > quitTimeout {
		_ = conn.SetDeadline(time.Now().Add(quitTimeout))
	}
	_ = c.Quit()
	return reply, nil
}

// data sends DATA, then msg, and returns the text of the server's final
// reply, which [smtp.Client.Data] drops.
func data(c *smtp.Client, msg []byte) (string, error) {
	id, err := c.Text.Cmd("DATA")
	if err != nil {
		return "", err
	}
	c.Text.StartResponse(id)
	_, _, err = c.Text.ReadResponse(354)
	c.Text.EndResponse(id)
	if err != nil {
		return "", err
	}
	w := c.Text.DotWriter()
	if _, err := w.Write(msg); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	_, reply, err := c.Text.ReadResponse(250)
	return reply, err
}

// plainAuth is AUTH PLAIN (RFC 4616). Unlike [smtp.PlainAuth] it does not
// check the connection itself: send does, on the address it dialled,
// before it calls [smtp.Client.Auth].
type plainAuth struct {
	username, password string
}

func (a plainAuth) Start(*smtp.ServerInfo) (string, []byte, error) {
	return "PLAIN", []byte("\x00" + a.username + "\x00" + a.password), nil
}

func (a plainAuth) Next(_ []byte, more bool) ([]byte, error) {
	if more {
		return nil, errors.New("mail: unexpected server challenge during AUTH PLAIN")
	}
	return nil, nil
}

// isLoopbackAddr reports whether addr is a loopback TCP address.
func isLoopbackAddr(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
