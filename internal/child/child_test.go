package child

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Kill of a child that exited by itself, reaped but with Done not closed
// yet (the moment between Wait and close), waits for Done and succeeds:
// the child is gone, which is what Kill promises.
func TestKillAfterExit(t *testing.T) {
	exe, err := exec.LookPath("true")
	require.NoError(t, err)
	cmd := exec.Command(exe)
	require.NoError(t, cmd.Start())
	require.NoError(t, cmd.Wait(), "reaped")
	p := &Process{cmd: cmd, done: make(chan struct{})}
	// The goroutine of Start closes Done just after Wait returns; here a
	// little later, so that Kill's signal meets the reaped child first.
	closed := time.AfterFunc(50*time.Millisecond, func() { close(p.done) })
	defer closed.Stop()
	require.NoError(t, p.Kill())
	select {
	case <-p.Done():
	default:
		t.Fatal("Kill returned before Done was closed")
	}
}
