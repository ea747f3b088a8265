package mail_test

import (
	"crypto/tls"
	"testing"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/mail"
)

// BenchmarkDeliver measures Deliver against the test server on loopback,
// one request after another and from eight goroutines at once (as the
// dispatcher's concurrency would): in the clear, and with STARTTLS and
// AUTH as a provider's submission port wants them.
func BenchmarkDeliver(b *testing.B) {
	servers := []struct {
		name      string
		opts      serverOptions
		configure func(*mail.Config)
	}{
		{name: "Clear", opts: serverOptions{}, configure: func(*mail.Config) {}},
		{
			name: "STARTTLSAndAUTH",
			opts: serverOptions{startTLS: true, username: testUsername, password: testPassword},
			configure: func(cfg *mail.Config) {
				cfg.TLS = mail.TLSRequired
				cfg.TLSConfig = &tls.Config{RootCAs: testCertificate().pool}
				cfg.Username, cfg.Password = testUsername, testPassword
			},
		},
	}
	reuses := []struct {
		name         string
		maxIdleConns int
	}{
		{name: "NewConnections", maxIdleConns: -1},
		{name: "KeptConnections", maxIdleConns: 0}, // the default
	}
	for _, srv := range servers {
		for _, reuse := range reuses {
			configure := func(cfg *mail.Config) {
				srv.configure(cfg)
				cfg.MaxIdleConns = reuse.maxIdleConns
			}
			b.Run(srv.name+"/"+reuse.name, func(b *testing.B) {
				b.Run("Serial", func(b *testing.B) {
					bundle := setup(b, srv.opts, configure)
					p := newPending("welcome", welcomeData())
					b.ReportAllocs()
					for b.Loop() {
						requireDelivered(b, bundle.mailer.Deliver(b.Context(), p))
					}
				})
				b.Run("Parallel8", func(b *testing.B) {
					bundle := setup(b, srv.opts, configure)
					p := newPending("welcome", welcomeData())
					b.ReportAllocs()
					b.SetParallelism(4) // 4 × GOMAXPROCS goroutines: 8 on two cores
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							requireDelivered(b, bundle.mailer.Deliver(b.Context(), p))
						}
					})
				})
			})
		}
	}
}

// requireDelivered fails b unless outcome is Delivered. It does not stop
// the benchmark: RunParallel's goroutines may not.
func requireDelivered(b *testing.B, outcome delivery.Outcome) {
	if outcome.Kind() != delivery.KindDelivered {
		b.Errorf("Deliver answered %s", outcome)
	}
}
