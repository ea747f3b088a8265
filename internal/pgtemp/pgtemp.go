// Package pgtemp starts a throwaway PostgreSQL cluster from the local
// PostgreSQL binaries, for tests, demos and benchmarks. The cluster lives in
// a temporary directory, listens on a free loopback port, and is removed by
// Stop. When the process runs as root the server runs as an unprivileged
// user (postgres, or nobody), because PostgreSQL refuses to run as root.
// A cluster can run with its clock set off the system's (Options.ClockOffset),
// to test clock skew between an application and its database.
package pgtemp

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the PostgreSQL driver
)

// Options tune a cluster. A nil *Options means all defaults.
type Options struct {
	// Durable keeps fsync and synchronous_commit on, as a production server
	// has them. The default (false) turns them off, which is right for tests
	// and wrong for any figure that claims to be a throughput.
	Durable bool
	// Settings are extra server settings (name to value), passed as -c.
	Settings map[string]string
	// ClockOffset sets the server's wall clock this far from the system
	// clock, ahead when positive: now() and every other time the server
	// reads are shifted, as on a machine whose clock is set off. The
	// server runs with libfaketime preloaded (LD_PRELOAD), which leaves
	// the monotonic clock that times the server's waits alone. Start
	// fails when libfaketime is missing (Debian: apt-get install
	// libfaketime) or the server's clock is not off by the offset, within
	// a second. Zero, the default, leaves the clock alone.
	ClockOffset time.Duration
}

// Cluster is a running throwaway PostgreSQL server. Its methods are not safe
// for concurrent use. Stop it to remove its files.
type Cluster struct {
	bin   string // directory of initdb and postgres
	dir   string // root of everything the cluster owns
	port  int
	args  []string
	env   []string // extra environment of the server
	clock time.Duration
	cred  *syscall.Credential
	cmd   *exec.Cmd
	exit  chan struct{}
	owner string
}

// Start initialises a cluster in a new temporary directory and starts it.
func Start(ctx context.Context, opts *Options) (*Cluster, error) {
	if opts == nil {
		opts = &Options{}
	}
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	env, err := clockEnv(opts.ClockOffset)
	if err != nil {
		return nil, err
	}
	removeStale(os.TempDir())
	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: %w", err)
	}
	c := &Cluster{bin: bin, dir: dir, env: env, clock: opts.ClockOffset, owner: "current user"}
	if err := c.dropPrivileges(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c.args = serverArgs(opts)
	// A free port can be taken between our probe and the server's bind:
	// try a few.
	for range 5 {
		if c.port, err = freePort(); err != nil {
			break
		}
		if err = c.start(ctx); err == nil {
			return c, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// dirPrefix begins the name of a cluster's directory, which goes on with
// the process id of its owner: tidings-pg-<pid>-<random>.
const dirPrefix = "tidings-pg-"

// removeStale removes the cluster directories in tmp whose owner is gone.
// The server of a process that was killed (an interrupted test run, a
// test binary's timeout) dies with it, but its directory stays behind.
// A directory whose owner still runs, or whose name says no owner, stays.
func removeStale(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*-*"))
	for _, dir := range dirs {
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), dirPrefix), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 {
			continue
		}
		// ESRCH: no such process. EPERM is one of another user's.
		if err := syscall.Kill(n, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// URL is a connection string for the cluster's superuser and its postgres
// database.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://tidings@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port is the loopback TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// Stop shuts the server down (fast mode) and removes its files.
func (c *Cluster) Stop() error {
	err := c.shutdown(syscall.SIGINT)
	if rmErr := os.RemoveAll(c.dir); err == nil {
		err = rmErr
	}
	return err
}

// Restart stops the server, in immediate mode (as a crash would) when
// immediate is set, and starts it again on the same port.
func (c *Cluster) Restart(ctx context.Context, immediate bool) error {
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	if err := c.shutdown(sig); err != nil {
		return err
	}
	return c.start(ctx)
}

// StopServer stops the server (fast mode) and leaves its files, so Resume
// can start it again.
func (c *Cluster) StopServer() error { return c.shutdown(syscall.SIGINT) }

// Resume starts a server stopped by StopServer.
func (c *Cluster) Resume(ctx context.Context) error { return c.start(ctx) }

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) dropPrivileges() error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(c.dir, uid, gid); err != nil {
			return fmt.Errorf("pgtemp: %w", err)
		}
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		c.owner = name
		return nil
	}
	return errors.New("pgtemp: running as root and found no postgres or nobody user to run the server as")
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// The server dies with the process that started it, even on SIGKILL,
	// and only then: in a process group of its own, a Ctrl-C at the
	// terminal reaches the program, which stops the server in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	return cmd
}

func (c *Cluster) initdb(ctx context.Context) error {
	out, err := c.command(ctx, "initdb", "-D", c.dataDir(), "-U", "tidings", "-A", "trust",
		"-E", "UTF8", "--no-locale", "-N").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtemp: initdb as %s: %w: %s", c.owner, err, tail(out))
	}
	return nil
}

func serverArgs(opts *Options) []string {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": "",
		"max_connections":         "300",
		"shared_buffers":          "128MB",
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		// For the fault suite's ledger, which tells a repeat before a
		// claim's commit from one after it.
		"track_commit_timestamp": "on",
	}
	if opts.Durable {
		delete(settings, "fsync")
		delete(settings, "synchronous_commit")
		delete(settings, "full_page_writes")
		delete(settings, "track_commit_timestamp")
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	var args []string
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

func (c *Cluster) start(ctx context.Context) error {
	logPath := filepath.Join(c.dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtemp: %w", err)
	}
	args := append([]string{"-D", c.dataDir(), "-p", strconv.Itoa(c.port)}, c.args...)
	// Not bound to ctx: the server outlives the call that started it.
	cmd := c.command(context.WithoutCancel(ctx), "postgres", args...)
	cmd.Env = append(cmd.Env, c.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("pgtemp: start postgres: %w", err)
	}
	c.cmd, c.exit = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(c.exit)
	}()
	if err := c.waitReady(ctx); err != nil {
		_ = c.shutdown(syscall.SIGQUIT)
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("pgtemp: postgres did not come up: %w: %s", err, tail(log))
	}
	if c.clock != 0 {
		if err := c.checkClock(ctx); err != nil {
			_ = c.shutdown(syscall.SIGINT)
			return err
		}
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := sql.Open("postgres", c.URL()+"&connect_timeout=2")
	if err != nil {
		return err
	}
	defer db.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// The server that answers must be this one: the port may have been
		// taken since it was free (by another test binary's cluster), and
		// this server not have bound it yet, or ever.
		var dir string
		if err = db.QueryRowContext(ctx, `SHOW data_directory`).Scan(&dir); err == nil {
			if dir != c.dataDir() {
				return fmt.Errorf("another server answers on port %d", c.port)
			}
			return nil
		}
		select {
		case <-c.exit:
			return errors.New("server exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func (c *Cluster) shutdown(sig syscall.Signal) error {
	if c.cmd == nil {
		return nil
	}
	select {
	case <-c.exit:
	default:
		if err := c.cmd.Process.Signal(sig); err != nil {
			return fmt.Errorf("pgtemp: signal postgres: %w", err)
		}
		select {
		case <-c.exit:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exit
		}
	}
	c.cmd = nil
	return nil
}

// fakeTimeLibs are where libfaketime is looked for, in order: the Debian
// and Ubuntu package's directory, other distributions', and a build
// installed from source. scripts/ensure-faketime.sh looks in the same
// places.
var fakeTimeLibs = []string{
	"/usr/lib/*/faketime/libfaketime.so.1",
	"/usr/lib64/faketime/libfaketime.so.1",
	"/usr/lib/faketime/libfaketime.so.1",
	"/usr/local/lib/faketime/libfaketime.so.1",
}

// clockEnv is the environment that sets the server's clock offset off the
// system clock, through libfaketime: nothing for a zero offset.
func clockEnv(offset time.Duration) ([]string, error) {
	if offset == 0 {
		return nil, nil
	}
	var lib string
	for _, pattern := range fakeTimeLibs {
		if found, _ := filepath.Glob(pattern); len(found) > 0 {
			lib = found[0]
			break
		}
	}
	if lib == "" {
		return nil, fmt.Errorf("pgtemp: ClockOffset needs libfaketime, found in none of %s (Debian: apt-get install libfaketime; scripts/ensure-faketime.sh does)",
			strings.Join(fakeTimeLibs, ", "))
	}
	preload := lib
	if prev := os.Getenv("LD_PRELOAD"); prev != "" {
		preload += ":" + prev
	}
	// A relative offset in seconds, signed. The monotonic clock stays
	// real: the server times its waits and timeouts with it.
	sign := "+"
	if offset < 0 {
		sign = ""
	}
	return []string{
		"LD_PRELOAD=" + preload,
		"FAKETIME=" + sign + strconv.FormatFloat(offset.Seconds(), 'f', -1, 64),
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}, nil
}

// checkClock fails unless the server's clock is off this process's by the
// cluster's offset, within a second: libfaketime was loaded and understood.
func (c *Cluster) checkClock(ctx context.Context) error {
	db, err := sql.Open("postgres", c.URL())
	if err != nil {
		return fmt.Errorf("pgtemp: check the clock: %w", err)
	}
	defer db.Close()
	before := time.Now()
	var server time.Time
	if err := db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&server); err != nil {
		return fmt.Errorf("pgtemp: check the clock: %w", err)
	}
	after := time.Now()
	const slack = time.Second
	// The server read its clock between before and after.
	if server.Before(before.Add(c.clock-slack)) || server.After(after.Add(c.clock+slack)) {
		return fmt.Errorf("pgtemp: the server's clock is off by %s, not by ClockOffset (%s): libfaketime did not take effect",
			server.Sub(before.Add(after.Sub(before)/2)).Round(time.Millisecond), c.clock)
	}
	return nil
}

// binDir finds initdb and postgres: TIDINGS_PG_BIN when set, else the
// newest /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func binDir() (string, error) {
	if dir := os.Getenv("TIDINGS_PG_BIN"); dir != "" {
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return versionOf(b) - versionOf(a)
	})
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgtemp: no PostgreSQL server binaries found (install postgresql, or set TIDINGS_PG_BIN to the directory of initdb and postgres)")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtemp: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
