package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pgbench run that a client left, or that pgbench calls incomplete, is
// an error, not a ceiling: a low ceiling would make every drain's ratio to
// it look better than it is.
func TestAPgbenchRunThatFailedIsNoCeiling(t *testing.T) {
	t.Parallel()
	const report = `number of transactions actually processed: 1000
number of failed transactions: %s
tps = 50.0 (without initial connection time)
`
	for _, tc := range []struct {
		name, failed, extra string
		exit                int
		ok                  bool
	}{
		{"Clean", "0 (0.000%)", "", 0, true},
		{"FailedTransactions", "3 (0.300%)", "", 0, false},
		{"ClientAborted", "0 (0.000%)", "client 2 aborted in command 4 (SQL) of script 0", 0, false},
		{"RunAborted", "0 (0.000%)", "Run was aborted; the above results are incomplete.", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			require.NoError(t, os.WriteFile(out, []byte(tc.extra+"\n"+fmt.Sprintf(report, tc.failed)), 0o600))
			bin := filepath.Join(dir, "pgbench")
			require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\ncat "+out+"\nexit "+strconv.Itoa(tc.exit)+"\n"), 0o700))

			r, err := runPgbench(t.Context(), bin, "postgres://unused", filepath.Join(dir, "script.sql"), 4, time.Second)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, pgbenchResult{tps: 50, transactions: 1000}, r)
				return
			}
			require.ErrorContains(t, err, "pgbench script.sql failed")
		})
	}
}
