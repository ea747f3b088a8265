package pgtemp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A cluster whose port another server took between the probe and the
// bind does not take that server for its own.
func TestAnotherServerOnThePortIsNotThisOne(t *testing.T) {
	ctx := context.Background()
	a, err := Start(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Stop() })
	b, err := Start(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Stop() })
	require.NoError(t, b.StopServer())

	b.port = a.port // taken by a since b probed it
	require.ErrorContains(t, b.start(ctx), "another server answers on port")
}

// The directory of a cluster whose owner was killed is removed when the
// next cluster starts; one whose owner runs, or that is no cluster's,
// stays.
func TestStaleDirectoriesAreRemoved(t *testing.T) {
	tmp := t.TempDir()
	gone := exec.Command("true")
	require.NoError(t, gone.Run()) // its process id is free now
	mk := func(name string) string {
		dir := filepath.Join(tmp, name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o700))
		return dir
	}
	stale := mk(fmt.Sprintf("%s%d-123", dirPrefix, gone.Process.Pid))
	own := mk(fmt.Sprintf("%s%d-456", dirPrefix, os.Getpid()))
	other := mk(dirPrefix + "789") // no owner in its name

	removeStale(tmp)

	require.NoDirExists(t, stale, "its owner is gone")
	require.DirExists(t, own, "its owner runs")
	require.DirExists(t, other)
}
