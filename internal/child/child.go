// Package child runs a program, usually this test binary again, as a child
// process that a test or a command kills, stops and watches: the crash
// harness of the relay's, the dispatcher's and the fault suite's tests and
// of the soak command, written once.
package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a running child.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // what Wait returned; read after done

	mu    sync.Mutex
	lines []string      // its stdout so far, when asked for
	read  int           // lines[:read] are read
	more  chan struct{} // closed when a line comes or stdout ends
	eof   bool          // stdout has ended
}

// Start starts exe with args and with env added to this process's
// environment. Its stderr is this process's; so is its stdout, unless
// lines is set: then Next and Rest read it a line at a time. The child is killed
// when this process dies, even by SIGKILL.
func Start(exe string, args []string, env map[string]string, lines bool) (*Process, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	var scan *bufio.Scanner
	if lines {
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, fmt.Errorf("child: %w", err)
		}
		scan = bufio.NewScanner(out)
		p.more = make(chan struct{})
	} else {
		cmd.Stdout = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("child: start %s: %w", exe, err)
	}
	go func() {
		if scan != nil {
			for scan.Scan() {
				p.add(scan.Text(), false)
			}
			p.add("", true)
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Test starts this test binary again as a child that runs no test, with
// env added: its TestMain calls Run and so does the child's work instead.
// It fails tb when the child does not start, and kills the child when tb
// ends.
func Test(tb testing.TB, env map[string]string, lines bool) *Process {
	tb.Helper()
	p, err := Start(os.Args[0], []string{"-test.run=^$"}, env, lines)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Kill() })
	return p
}

// Next waits for the child's next stdout line that starts with prefix,
// skipping the others, and returns the rest of it. It fails when the
// child's stdout ends, or within passes, first.
func (p *Process) Next(prefix string, within time.Duration) (string, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		p.mu.Lock()
		for p.read < len(p.lines) {
			line := p.lines[p.read]
			p.read++
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				p.mu.Unlock()
				return rest, nil
			}
		}
		eof, more := p.eof, p.more
		p.mu.Unlock()
		if eof {
			return "", fmt.Errorf("child: waited for a line %q; its stdout ended (%v)", prefix, p.exit())
		}
		select {
		case <-more:
		case <-timer.C:
			return "", fmt.Errorf("child: waited %s for a line %q", within, prefix)
		}
	}
}

// Rest waits until the child has exited and returns the stdout lines Next
// has not read.
func (p *Process) Rest() []string {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	rest := p.lines[p.read:]
	p.read = len(p.lines)
	return rest
}

// add records a line of stdout, or its end, and wakes Next.
func (p *Process) add(line string, eof bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if eof {
		p.eof = true
	} else {
		p.lines = append(p.lines, line)
	}
	close(p.more)
	p.more = make(chan struct{})
}

// exit is how the child exited, once it has.
func (p *Process) exit() error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(time.Second):
		return errors.New("still running")
	}
}

// ExitCode is the child's exit status, -1 when a signal ended it; read it
// after Done.
func (p *Process) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// Done is closed once the child has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the child exited; read it after Done.
func (p *Process) Err() error { return p.err }

// PID is the child's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL and waits until the child is gone.
func (p *Process) Kill() error {
	err := p.cmd.Process.Signal(syscall.SIGKILL)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("child: kill: %w", err)
	}
	// Exited already (reaped, and Done about to close), or killed now.
	<-p.done
	return nil
}

// Stop sends SIGTERM and waits for the child to exit, and returns how it
// exited; it kills the child and says so when within passes first.
func (p *Process) Stop(within time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.err
	case <-timer.C:
		_ = p.Kill()
		return fmt.Errorf("child: still running %s after SIGTERM; killed", within)
	}
}

// Run is the child's side: when the environment variable key is set, it
// runs fn with a context that SIGTERM ends and reports true, exiting with
// status 2 when fn fails; otherwise it reports false at once. Call it
// first thing in TestMain, or in main.
func Run(key string, fn func(ctx context.Context, value string) error) bool {
	value, ok := os.LookupEnv(key)
	if !ok {
		return false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := fn(ctx, value); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	return true
}
