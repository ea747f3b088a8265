package console

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidings-go/tidings/notification"
)

// shutdownTimeout bounds how long ServeLocal waits for the requests in
// flight when its context ends.
const shutdownTimeout = 5 * time.Second

// LocalConfig configures ServeLocal. The zero value of each field means
// its default.
type LocalConfig struct {
	// Client configures the notification.Client of the console: its
	// Schema (default "tidings") and its Consumer (the dispatcher's, which
	// Cancel needs; default notification.ConsumerDefault).
	Client notification.ClientConfig

	// Console configures the handler (see Options).
	Console Options

	// Port is the loopback port to listen on. 0 (the default) takes any
	// free one: ListeningFunc says which.
	Port int

	// ListeningFunc, if not nil, is called once the console listens, with
	// its address, such as "http://127.0.0.1:8089/".
	ListeningFunc func(url string)
}

// loopbackHost serves h the requests whose Host is 127.0.0.1 or localhost
// on port, and refuses any other.
func loopbackHost(port int, h http.Handler) http.Handler {
	p := strconv.Itoa(port)
	allowed := map[string]bool{"127.0.0.1:" + p: true, "localhost:" + p: true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[strings.ToLower(r.Host)] {
			http.Error(w, "this console answers only at 127.0.0.1:"+p+" and localhost:"+p, http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServeLocal serves the console of db on 127.0.0.1, for a quick look from
// the machine it runs on, until ctx ends: then it lets the requests in
// flight finish for up to five seconds, closes what is still open, and
// returns nil; db stays open, the caller's to close. It checks the
// connection first, and returns an error if the database does not answer,
// the configuration is invalid or the port is taken. db may be of either
// driver (lib/pq's, or pgx's through stdlib.OpenDBFromPool): the console
// imports none. It listens on loopback only, because the console has no
// authentication of its own: to show it to others, mount New's handler
// behind the service's authentication instead. And it answers only
// requests addressed to it by that address or as localhost (their Host
// header): a web page the operator opens elsewhere cannot make a name of
// its own resolve to the loopback address (DNS rebinding) and use the
// console as its own page.
func ServeLocal(ctx context.Context, db *sql.DB, cfg *LocalConfig) error {
	var c LocalConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("%w: Port %d is not a TCP port", ErrOptions, c.Port)
	}
	if db == nil {
		return fmt.Errorf("%w: db is nil", ErrOptions)
	}
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("console: connect to the database: %w", err)
	}
	client, err := notification.NewClient(db, &c.Client)
	if err != nil {
		return err
	}
	h, err := New(client, &c.Console)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)))
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(c.Console.BasePath+"/", h)
	srv := &http.Server{Handler: loopbackHost(ln.Addr().(*net.TCPAddr).Port, mux), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if c.ListeningFunc != nil {
		c.ListeningFunc("http://" + ln.Addr().String() + c.Console.BasePath + "/")
	}
	select {
	case err := <-served:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(stop); err != nil {
		_ = srv.Close() // what is still running after the timeout
	}
	<-served // http.ErrServerClosed
	return nil
}
