// Command pgx is a service built on pgx v5 alone, with no lib/pq in its
// dependency graph: it signs a user up and stages the welcome mail in the
// same pgx transaction, and its relay, dispatcher and LISTEN session run
// on its pgxpool.
//
//	DATABASE_URL=postgres://... go run ./examples/pgx ada@example.com
//
// It migrates the library's tables and its own users table into the schema
// "pgx_example", signs up each address given, prints each mail as the
// dispatcher delivers it, and exits once all are delivered.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/dbtx/pgxtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pgxlisten"
)

const (
	// schemaDefault holds the example's tables.
	schemaDefault = "pgx_example"
	// module is the relay the welcome mails go to.
	module = "accounts"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL"), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pgx:", err)
		os.Exit(1)
	}
}

// run signs up every address and waits until each welcome mail is
// delivered.
func run(ctx context.Context, dsn string, emails []string, out io.Writer) error {
	if dsn == "" {
		return errors.New("DATABASE_URL names no database")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	// A connection for each transaction the dispatcher holds, and a few
	// for the relay's own statements and the service's writes.
	cfg.MaxConns = relay.ConnectionsDefault + 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrate(ctx, db, schemaDefault); err != nil {
		return err
	}
	svc, err := newService(pool, db, schemaDefault, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var runErr error
	// A relay that stops (one that refused to start, say) ends the waits.
	wg.Go(func() { runErr = svc.Run(ctx); cancel() })
	err = signUpAll(ctx, svc, emails)
	cancel()
	wg.Wait()
	return errors.Join(runErr, err)
}

// signUpAll signs each address up, waiting until its welcome mail is
// delivered.
func signUpAll(ctx context.Context, svc *service, emails []string) error {
	for _, email := range emails {
		id, err := svc.SignUp(ctx, email)
		if err != nil {
			return err
		}
		st, err := svc.client.Wait(ctx, id)
		if err != nil {
			return err
		}
		if st.Outcome != notification.OutcomeDelivered {
			return fmt.Errorf("the welcome mail to a new user ended %s (%s): %s", st.State, st.Code, st.Reason)
		}
	}
	return nil
}

// migrate installs the library's tables and the example's users table in
// schema.
func migrate(ctx context.Context, db *sql.DB, schema string) error {
	if err := tidings.Migrate(ctx, db, schema); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgx.Identifier{schema, "users"}.Sanitize()+
		` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL UNIQUE)`)
	return err
}

// service is the example's application: sign-ups, and the relay that
// delivers their welcome mails. Its mail delivery prints to out.
type service struct {
	pool       *pgxpool.Pool
	db         *sql.DB // the pool through stdlib.OpenDBFromPool, for the relay and the dispatcher
	users      string  // the users table, quoted
	schema     string
	client     *notification.Client
	dispatcher *notification.Dispatcher
}

func newService(pool *pgxpool.Pool, db *sql.DB, schema string, out io.Writer) (*service, error) {
	client, err := notification.NewClient(db, &notification.ClientConfig{Schema: schema})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	mail := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "mail %s to %s: %s\n", p.ID, p.Recipient, p.Template)
		return delivery.Delivered()
	})
	d, err := notification.NewDispatcher(&notification.Config{Deliveries: map[string]delivery.Delivery{"mail": mail}})
	if err != nil {
		return nil, err
	}
	return &service{pool: pool, db: db, users: pgx.Identifier{schema, "users"}.Sanitize(), schema: schema,
		client: client, dispatcher: d}, nil
}

// SignUp inserts the user and stages the welcome mail in one pgx
// transaction: the mail exists if and only if the user does.
func (s *service) SignUp(ctx context.Context, email string) (uuid.UUID, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.users+` (email) VALUES ($1)`, email); err != nil {
		return uuid.Nil, fmt.Errorf("sign up: %w", err)
	}
	id, err := s.client.Stage(ctx, pgxtx.Wrap(tx), module,
		notification.Request{Channel: "mail", Recipient: email, Template: "welcome"})
	if err != nil {
		return uuid.Nil, fmt.Errorf("sign up: %w", err)
	}
	return id, tx.Commit(ctx)
}

// Run runs the relay of the module on the service's pool, woken through
// pgx's LISTEN, until ctx ends.
func (s *service) Run(ctx context.Context) error {
	cfg := s.relayConfig()
	return relay.Supervise(ctx, s.db, &cfg, s.dispatcher)
}

// relayConfig is the relay of the module: woken at commit by a LISTEN
// session through pgx, on a connection of its own beside the pool, and
// sending its sink's BEGIN and COMMIT with the statements next to them in
// pgx's batches.
func (s *service) relayConfig() relay.Config {
	return relay.Config{
		Module:   module,
		Schema:   s.schema,
		Listener: pgxlisten.New(s.pool.Config().ConnConfig),
		Pipeline: pgxtx.Pipeline,
	}
}
