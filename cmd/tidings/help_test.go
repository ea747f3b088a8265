package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

// TestHelpExamplesRun runs every example of every command's help, as a
// reader would paste it, against a world: the request ids of the
// examples become the world's dead request, the schema the world's, a
// directory a fresh one; migrate runs as the schema's owner, the others
// as the application's role. Every one must run: done, nothing matched,
// or (reemit, asked) not confirmed.
func TestHelpExamplesRun(t *testing.T) {
	t.Parallel()
	w := setup(t)
	id := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	for _, c := range commands() {
		help := runCommand(t, nil, nil, c.name, "-h")
		require.Equal(t, exitOK, help.code, help.errOut)
		require.True(t, strings.HasPrefix(help.out, "Usage: tidings "+c.name+" [flags]"), help.out)
		_, examples, ok := strings.Cut(help.out, "\nExamples:\n")
		require.True(t, ok, "%s -h has examples", c.name)
		lines := strings.Split(strings.TrimSpace(examples), "\n")
		require.NotEmpty(t, lines)
		for _, line := range lines {
			fields := strings.Fields(line)
			require.Equal(t, []string{"tidings", c.name}, fields[:2], line)
			args := fields[1:]
			for i, a := range args {
				switch {
				case id.MatchString(a):
					args[i] = w.invalid.String()
				case i > 0 && args[i-1] == "--schema":
					args[i] = w.schema
				case i > 0 && args[i-1] == "--dir":
					args[i] = t.TempDir()
				case i > 0 && args[i-1] == "--port":
					args[i] = "0"
				}
			}
			if !slices.Contains(args, "--schema") {
				args = append(args, "--schema", w.schema)
			}
			dsn := w.dsn
			if c.name == "migrate" {
				dsn = pgtest.AdminURL(t)
			}
			var r result
			if c.name == "serve" {
				r, _ = serving(t, map[string]string{"DATABASE_URL": dsn}, "/", args...)
			} else {
				r = runCommand(t, map[string]string{"DATABASE_URL": dsn}, typing("n\n"), args...)
			}
			require.Contains(t, []int{exitOK, exitNone, exitDeclined}, r.code, "%s: %s", line, r.errOut)
		}
	}
}

// TestBinary builds the command as go install does and runs it as a
// shell would: DATABASE_URL from the environment, exit codes from the
// process, and a pipe, which is no terminal, for standard input.
func TestBinary(t *testing.T) {
	t.Parallel()
	w := setup(t)
	bin := filepath.Join(t.TempDir(), "tidings")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	tidings := func(stdin string, args ...string) (string, int) {
		cmd := exec.CommandContext(t.Context(), bin, append(args, "--schema", w.schema)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+w.dsn)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	out2, code := tidings("", "status", w.invalid.String())
	require.Equal(t, exitOK, code, out2)
	require.Regexp(t, `state\s+dead at `, out2)
	_, code = tidings("", "status", "0196b3c2-5f4e-7a1b-9c3d-2e4f6a8b0c1d")
	require.Equal(t, exitNone, code)
	out2, code = tidings("y\n", "reemit", "--all")
	require.Equal(t, exitUsage, code, "a pipe is no terminal to ask at: %s", out2)
	require.Contains(t, out2, "--yes")
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()
	require.False(t, isTerminal(null), "the null device, as cron gives, is no terminal either")
	out2, code = tidings("", "reemit", "--all", "--yes")
	require.Equal(t, exitOK, code, out2)
	require.Contains(t, out2, "re-emitted 2 requests")
}
