package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/console"
)

var serveCommand = &command{
	name:    "serve",
	summary: "serve the operators' web page on this machine's loopback",
	about: `Serves the operators' web page (package notification/console: the
overview, dead requests by reason code with re-emit, one request and its
timeline, search by id or correlation id) on 127.0.0.1 until interrupted,
and prints its address. The page has no log-in of its own, so it listens
on loopback only: to show it to others, mount console.New in a service,
behind its authentication. --read-only offers no re-emit and no cancel.
--consumer must be the dispatcher's Config.Consumer when it is not the
default (cancel needs it).`,
	examples: `  tidings serve
  tidings serve --port 8089 --read-only`,
	run: runServe,
}

func runServe(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	port := fs.Int("port", 0, "loopback `port` to listen on; 0 takes any free one")
	readOnly := fs.Bool("read-only", false, "no re-emit, no cancel: the page only shows")
	consumer := fs.String("consumer", notification.ConsumerDefault, "the dispatcher's inbox consumer")
	if code, ok := c.parseFlags(e, fs, args); !ok {
		return code
	}
	dsn, err := cn.dsn()
	if err != nil {
		return c.fail(e, err)
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return c.fail(e, err)
	}
	defer db.Close()
	err = console.ServeLocal(ctx, db, &console.LocalConfig{
		Client:  notification.ClientConfig{Schema: cn.schema, Consumer: *consumer},
		Console: console.Options{ReadOnly: *readOnly},
		Port:    *port,
		ListeningFunc: func(url string) {
			fmt.Fprintf(e.stdout, "serving %s until interrupted\n", url)
		},
	})
	if errors.Is(err, console.ErrOptions) {
		return c.usageError(e, "%v", err)
	}
	if err != nil {
		return c.fail(e, err)
	}
	return exitOK
}
