package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The demo is the end-to-end test of the example service: three bookings
// confirmed through the API under every recipient rule, every channel
// delivered where the rules let it, the security notices delivered, the
// verification code gone from the database, the invalid number dead with
// Twilio's code, and delivered once re-emitted.
func TestDemo(t *testing.T) {
	t.Setenv("DATABASE_URL", "") // a throwaway cluster of its own
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out), out.String())
	got := out.String()
	t.Log(got)
	require.Contains(t, got, "delivered 13, skipped 8 (alan's, and hopper's pushes), duplicate 6, dead 1")
	require.Regexp(t, `duplicate [0-9a-f-]{36}: of [0-9a-f-]{36}, the first receipt \S+`, got)
	require.Regexp(t, `ada's booking text: deferred at [0-9:]+ by quiet hours [0-9:]+-[0-9:]+ \(sms\) until`, got)
	require.Contains(t, got, "ada's booking text: delivered at")
	require.Contains(t, got, "mail  5:")
	require.Contains(t, got, "push  2 ")
	require.Contains(t, got, "sms   1 ")
	require.Contains(t, got, "inapp alan: 0")
	require.Contains(t, got, "inapp hopper: 3")
	require.Contains(t, got, "password-changed mail to alan, who turned everything off: delivered")
	require.Contains(t, got, "verification code to ada: delivered, the text carried a 6-digit code; rows in the database holding it now: 0")
	require.Contains(t, got, "twilio rejected the message (400): error 21211")
	require.NotContains(t, got, "+15005550001", "the dead reason does not quote the number")
	require.Regexp(t, `processed \(provider reference SM0+3\); sms received 3`, got)
}
