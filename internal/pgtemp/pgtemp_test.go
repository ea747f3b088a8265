package pgtemp

import (
	"context"
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
