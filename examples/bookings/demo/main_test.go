package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The demo is the end-to-end test of the example service: three bookings
// confirmed through the API, every channel delivered, the invalid number
// dead with Twilio's code, and delivered once re-emitted.
func TestDemo(t *testing.T) {
	t.Setenv("DATABASE_URL", "") // a throwaway cluster of its own
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out), out.String())
	got := out.String()
	t.Log(got)
	require.Contains(t, got, "mail  6:")
	require.Contains(t, got, "push  3 ")
	require.Contains(t, got, "sms   2 ")
	require.Contains(t, got, "inapp hopper: 3")
	require.Contains(t, got, "twilio rejected the message (400): error 21211")
	require.NotContains(t, got, "+15005550001", "the dead reason does not quote the number")
	require.Regexp(t, `processed \(provider reference SM0+3\); sms received 3`, got)
}
