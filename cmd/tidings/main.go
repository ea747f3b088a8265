package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/lib/pq"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/internal/validate"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// The exit codes (see the package doc).
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNone     = 3 // not found, or nothing matched
	exitDeclined = 4 // asked, and not confirmed
)

// env is what one run of the command reads and writes.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// command is one of tidings' commands.
type command struct {
	name     string
	args     string // the synopsis after the flags, such as "ID"
	summary  string // one line, for tidings -h
	about    string // what it does, for its -h
	examples string // lines of runnable examples, for its -h
	run      func(ctx context.Context, e *env, c *command, args []string) int
}

// commands lists every command, in the order tidings -h shows them.
func commands() []*command {
	return []*command{migrateCommand, statusCommand, deadCommand, reemitCommand, cancelCommand, purgeCommand, statsCommand,
		suppressionsCommand, liftCommand, serveCommand}
}

// run runs the command line args (without the program's name) and
// returns the exit code; main is run with the process's streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "-h"}, getenv, stdin, stdout, stderr)
		}
		usage(e.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, e, c, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "tidings: unknown command %q\n\n", args[0])
	usage(e.stderr)
	return exitUsage
}

// usage writes the list of commands to w.
func usage(w io.Writer) {
	fmt.Fprint(w, "tidings operates the tables of tidings: status, dead requests, re-emit, stats, migrations.\n\n")
	fmt.Fprint(w, "Usage: tidings COMMAND [flags] [arguments]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprint(w, `
Every command takes --database (default $DATABASE_URL), --schema (default tidings)
and --json. Run "tidings COMMAND -h" for its flags and examples.

Exit codes: 0 done, 1 error, 2 usage, 3 nothing matched or not found,
4 not confirmed.
`)
}

// help writes c's help, with the flags of fs, to w.
func (c *command) help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", strings.TrimSpace("tidings "+c.name+" [flags] "+c.args), strings.TrimSpace(c.about))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(c.examples, "\n"))
}

// flags returns the flag set of c, which writes nothing itself, with the
// flags every command has.
func (c *command) flags(e *env) (*flag.FlagSet, *conn) {
	fs := flag.NewFlagSet("tidings "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cn := &conn{}
	cn.register(e, fs)
	return fs, cn
}

// parse parses args into fs, flags and arguments in any order ("--" ends
// the flags), and returns the arguments. It answers -h with c's help on
// stdout, and a bad flag with the error on stderr; ok is false then, and
// code is the exit code.
func (c *command) parse(e *env, fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.help(e.stdout, fs)
			return nil, exitOK, false
		}
		if err != nil {
			return nil, c.usageError(e, "%v", err), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return c.checkText(e, fs, pos)
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return c.checkText(e, fs, append(pos, rest...))
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// checkText returns pos, or a usage error if a flag given or an argument
// is not text the database can take (a NUL byte, invalid UTF-8): it would
// fail its statement as a database error.
func (c *command) checkText(e *env, fs *flag.FlagSet, pos []string) ([]string, int, bool) {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil {
			err = validate.Text("--"+f.Name, f.Value.String())
		}
	})
	for i, arg := range pos {
		if err == nil {
			err = validate.Text(fmt.Sprintf("argument %d", i+1), arg)
		}
	}
	if err != nil {
		return nil, c.usageError(e, "%v", err), false
	}
	return pos, exitOK, true
}

// parseFlags is parse for a command that takes flags only.
func (c *command) parseFlags(e *env, fs *flag.FlagSet, args []string) (code int, ok bool) {
	pos, code, ok := c.parse(e, fs, args)
	if ok && len(pos) > 0 {
		return c.usageError(e, "%s takes no arguments, only flags; have %q", c.name, pos), false
	}
	return code, ok
}

// usageError writes a usage error of c to stderr and returns exitUsage.
func (c *command) usageError(e *env, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "tidings %s: %s\nRun \"tidings %s -h\" for its flags and examples.\n", c.name, fmt.Sprintf(format, args...), c.name)
	return exitUsage
}

// fail writes err to stderr and returns its exit code: exitUsage for a
// bad --database or --schema, or a value the library refuses, exitError
// for anything else.
func (c *command) fail(e *env, err error) int {
	switch {
	case errors.Is(err, errUsage) || errors.Is(err, notification.ErrConfig) || errors.Is(err, notification.ErrInvalidRequest):
		return c.usageError(e, "%v", err)
	case errors.Is(err, relay.ErrNotMigrated):
		fmt.Fprintf(e.stderr, "tidings %s: %v\nRun \"tidings migrate\" as the schema's owner first.\n", c.name, err)
	default:
		fmt.Fprintf(e.stderr, "tidings %s: %v\n", c.name, err)
	}
	return exitError
}

// errUsage marks an error in what the command was given.
var errUsage = errors.New("usage")

// conn holds the flags every command has: where the tables are, and how
// to print.
type conn struct {
	database string
	schema   string
	json     bool
	fromEnv  string // DATABASE_URL, the default of --database
}

// register adds the flags of conn to fs. The default of --database is
// DATABASE_URL, kept apart so that -h never prints it: it may hold a
// password.
func (cn *conn) register(e *env, fs *flag.FlagSet) {
	cn.fromEnv = e.getenv("DATABASE_URL")
	fs.StringVar(&cn.database, "database", "", "PostgreSQL connection `string` (postgres://... or key=value); default $DATABASE_URL")
	fs.StringVar(&cn.schema, "schema", tidings.SchemaDefault, "`schema` of the library's tables")
	fs.BoolVar(&cn.json, "json", false, "print JSON for scripts instead of tables")
}

// session is an open connection to the tables of --schema.
type session struct {
	db     *sql.DB
	client *notification.Client
	// now is the database's clock when the session opened: ages given on
	// the command line count back from it, as every time the library
	// writes comes from it.
	now time.Time
}

// connect opens a session on --database: a pool, checked with one round
// trip that reads the database's clock, and a client of --schema with
// cfg's other settings. Close it when done. The error never holds the
// connection string, which may hold a password.
func (cn *conn) connect(ctx context.Context, cfg notification.ClientConfig) (*session, error) {
	db, err := cn.pool()
	if err != nil {
		return nil, err
	}
	cfg.Schema = cn.schema
	s := &session{db: db}
	if s.client, err = notification.NewClient(db, &cfg); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := db.QueryRowContext(ctx, `SELECT now()`).Scan(&s.now); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return s, nil
}

// close closes the session's pool.
func (s *session) close() { _ = s.db.Close() }

// pool returns a pool on --database, not yet connected.
func (cn *conn) pool() (*sql.DB, error) {
	dsn, err := cn.dsn()
	if err != nil {
		return nil, err
	}
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	return db, nil
}

// dsn returns --database, or DATABASE_URL, once lib/pq understands it.
func (cn *conn) dsn() (string, error) {
	dsn := cmp.Or(cn.database, cn.fromEnv)
	if dsn == "" {
		return "", fmt.Errorf("%w: no database: pass --database or set DATABASE_URL", errUsage)
	}
	// Its parse error may quote the string, password included.
	if _, err := pq.NewConnector(dsn); err != nil {
		return "", fmt.Errorf("%w: --database is no connection string lib/pq understands (postgres://user@host/db, or host=... dbname=...)", errUsage)
	}
	return dsn, nil
}
