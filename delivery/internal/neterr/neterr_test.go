package neterr_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery/internal/neterr"
)

func TestDescribe(t *testing.T) {
	t.Parallel()

	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 587}
	opErr := func(op string, err error) error {
		return &net.OpError{Op: op, Net: "tcp", Addr: addr, Err: err}
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "NoSuchHost", err: &net.DNSError{Name: "smtp.example.org", IsNotFound: true}, want: "dns lookup: no such host"},
		{name: "DNSTimeout", err: &net.DNSError{Name: "smtp.example.org", IsTimeout: true}, want: "dns lookup: timeout"},
		{name: "DNSOther", err: &net.DNSError{Name: "smtp.example.org", Server: "192.0.2.53"}, want: "dns lookup: failed"},
		{name: "UnknownAuthority", err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, want: "tls handshake: certificate not trusted"},
		{name: "WrongHost", err: fmt.Errorf("handshake: %w", x509.HostnameError{Host: "smtp.example.org"}), want: "tls handshake: certificate not trusted"},
		{name: "Expired", err: x509.CertificateInvalidError{Reason: x509.Expired}, want: "tls handshake: certificate not trusted"},
		{name: "NotTLS", err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, want: "tls handshake: peer does not speak tls"},
		{name: "Refused", err: opErr("dial", syscall.ECONNREFUSED), want: "dial: connection refused"},
		{name: "Reset", err: opErr("read", syscall.ECONNRESET), want: "read: connection reset"},
		{name: "BrokenPipe", err: opErr("write", syscall.EPIPE), want: "write: broken pipe"},
		{name: "HostUnreachable", err: opErr("dial", syscall.EHOSTUNREACH), want: "dial: host unreachable"},
		{name: "NetworkUnreachable", err: opErr("dial", syscall.ENETUNREACH), want: "dial: network unreachable"},
		{name: "Closed", err: io.EOF, want: "op: connection closed by the peer"},
		{name: "ClosedMidway", err: fmt.Errorf("reading the reply: %w", io.ErrUnexpectedEOF), want: "op: connection closed by the peer"},
		{name: "Deadline", err: opErr("read", os.ErrDeadlineExceeded), want: "read: timeout"},
		{name: "SystemTimeout", err: syscall.ETIMEDOUT, want: "op: timeout"},
		{name: "Other", err: errors.New("smtp.example.org (192.0.2.7:587): something odd"), want: "op: failed"},
		{name: "OtherWithOp", err: opErr("dial", errors.New("192.0.2.7:587: something odd")), want: "dial: failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := neterr.Describe(tt.err, "peer", "op")
			require.Equal(t, tt.want, got)
			for _, never := range []string{"192.0.2", "587", "example.org"} {
				require.NotContains(t, got, never)
			}
		})
	}
}
