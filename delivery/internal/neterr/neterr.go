package neterr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
)

// Describe says what err is, from a fixed vocabulary: "dns lookup: no such
// host", "tls handshake: certificate not trusted", or the network
// operation and the kind of failure, such as "dial: connection refused" or
// "read: timeout". It never holds an address or a host name.
//
// peer names the other end where a description speaks of it, as in
// "connection closed by the server" with peer "server", and op is the
// operation when err names none, as in "request: failed" with op
// "request".
func Describe(err error, peer, op string) string {
	if dnsErr, ok := errors.AsType[*net.DNSError](err); ok {
		switch {
		case dnsErr.IsNotFound:
			return "dns lookup: no such host"
		case dnsErr.IsTimeout:
			return "dns lookup: timeout"
		default:
			return "dns lookup: failed"
		}
	}
	if isCertificate(err) {
		return "tls handshake: certificate not trusted"
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return "tls handshake: " + peer + " does not speak tls"
	}

	if opErr, ok := errors.AsType[*net.OpError](err); ok && opErr.Op != "" {
		op = opErr.Op // "dial", "read", "write", ...: a fixed set
	}
	kind := "failed"
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		kind = "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		kind = "connection reset"
	case errors.Is(err, syscall.EPIPE):
		kind = "broken pipe"
	case errors.Is(err, syscall.EHOSTUNREACH):
		kind = "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		kind = "network unreachable"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		kind = "connection closed by the " + peer
	case isTimeout(err):
		kind = "timeout"
	}
	return op + ": " + kind
}

// isCertificate reports whether err is a failure to verify the peer's
// certificate.
func isCertificate(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	_, ok := errors.AsType[x509.CertificateInvalidError](err)
	return ok
}

// isTimeout reports whether err is a timeout of the network or the
// system.
func isTimeout(err error) bool {
	if errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	netErr, ok := errors.AsType[net.Error](err)
	return ok && netErr.Timeout()
}
