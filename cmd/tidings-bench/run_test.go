package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A run that failed reports what it measured, says that it failed, and
// judges no target on a part of its rounds; nor does it save medians a
// later run would take as its baseline.
func TestAFailedRunJudgesNothing(t *testing.T) {
	t.Parallel()
	for _, failed := range []error{nil, errors.New("drain: delivered 99 of 100")} {
		cfg, err := parseConfig([]string{"-out", t.TempDir(), "-only", "drain", "-drain", "auto:dropped/500/500"}, io.Discard)
		require.NoError(t, err)
		res := newResults()
		res.add("ceiling/deliver50", "Ceiling", "pgbench", "events/s", 40_000, "")
		var out bytes.Buffer
		require.NoError(t, report(&out, cfg, res, time.Now(), map[string]string{}, failed))
		_, saved := os.Stat(filepath.Join(cfg.out, resultsFile))
		if failed == nil {
			require.Contains(t, out.String(), "### Targets")
			require.NoError(t, saved)
			continue
		}
		require.Contains(t, out.String(), "**This run failed** (drain: delivered 99 of 100)")
		require.NotContains(t, out.String(), "### Targets")
		require.ErrorIs(t, saved, os.ErrNotExist)
	}
}

// The sustained target compares the windows of the first -sustain with the
// first: a window wider than half of it leaves nothing to compare.
func TestASustainOfOneWindowIsRefused(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	_, err := parseConfig([]string{"-sustain", "2m", "-window", "70s"}, &stderr)
	require.ErrorIs(t, err, errUsage)
	require.Contains(t, stderr.String(), "-window: 1m10s is more than half of -sustain (2m0s)")
	_, err = parseConfig([]string{"-sustain", "2m", "-window", "1m"}, io.Discard)
	require.NoError(t, err)
}
