package ident_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/ident"
)

func TestCheck(t *testing.T) {
	t.Parallel()

	for _, name := range []string{"tidings", "_x", "a1", "relay_test_12", strings.Repeat("a", 63)} {
		require.NoError(t, ident.Check("schema", name), name)
	}
	for name, want := range map[string]string{
		"":                      "schema is empty",
		`a"; drop table x;--`:   `byte 1 is not allowed`,
		"Tidings":               "byte 0 is not allowed",
		"1abc":                  "byte 0 is not allowed",
		"a.b":                   "byte 1 is not allowed",
		"a b":                   "byte 1 is not allowed",
		"é":                     "byte 0 is not allowed",
		strings.Repeat("a", 64): "64 bytes long, at most 63",
	} {
		err := ident.Check("schema", name)
		require.ErrorContains(t, err, want, name)
		require.ErrorContains(t, err, "schema", name)
	}
}

func FuzzCheck(f *testing.F) {
	for _, seed := range []string{"tidings", "", `a"b`, "A", strings.Repeat("z", 64), "a\x00b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ident.Check("name", name) != nil {
			return
		}
		// Property: an accepted name never needs escaping and fits NAMEDATALEN.
		require.LessOrEqual(t, len(name), ident.MaxLen)
		require.Equal(t, `"`+name+`"`, ident.Quote(name))
		require.Equal(t, strings.ToLower(name), name)
	})
}

func TestCheckSchemaLeavesRoomForTheChannel(t *testing.T) {
	t.Parallel()
	require.NoError(t, ident.CheckSchema("schema", strings.Repeat("s", ident.SchemaMaxLen)))
	require.Len(t, strings.Repeat("s", ident.SchemaMaxLen)+ident.ChannelSuffix, ident.MaxLen)
	require.ErrorContains(t, ident.CheckSchema("schema", strings.Repeat("s", 57)), "schema is 57 bytes long, at most 56 allowed")
}
