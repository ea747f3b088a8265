package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

var cancelCommand = &command{
	name:    "cancel",
	args:    "ID",
	summary: "cancel a pending request",
	about: `Cancels the pending request ID: it will never be delivered. If a delivery
of it is running, cancel waits for its answer: a delivery that succeeds
wins, and the request stays delivered. --consumer must be the
dispatcher's Config.Consumer when it is not the default.

Exit code 3 when there is no such request, or it is no longer pending
(delivered, dead or cancelled already).`,
	examples: `  tidings cancel 0196b3c2-5f4e-7a1b-9c3d-2e4f6a8b0c1d
  tidings cancel 0196b3c2-5f4e-7a1b-9c3d-2e4f6a8b0c1d --json`,
	run: runCancel,
}

func runCancel(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	consumer := fs.String("consumer", notification.ConsumerDefault, "the dispatcher's inbox consumer")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(e, "want one request ID")
	}
	id, err := uuid.Parse(pos[0])
	if err != nil {
		return c.usageError(e, "%q is no request id", pos[0])
	}
	s, err := cn.connect(ctx, notification.ClientConfig{Consumer: *consumer})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	before, err := s.client.Status(ctx, id)
	if errors.Is(err, relay.ErrNotFound) {
		fmt.Fprintf(e.stderr, "tidings cancel: no request %s\n", id)
		return exitNone
	}
	if err != nil {
		return c.fail(e, err)
	}
	after := before
	if !before.Settled() {
		if after, err = s.client.Cancel(ctx, id); err != nil {
			return c.fail(e, err)
		}
	}
	cancelled := !before.Settled() && after.State == relay.StateCancelled
	if cn.json {
		if err := writeJSON(e.stdout, struct {
			ID        uuid.UUID   `json:"id"`
			Cancelled bool        `json:"cancelled"`
			State     relay.State `json:"state"`
		}{id, cancelled, after.State}); err != nil {
			return c.fail(e, err)
		}
	}
	if !cancelled {
		fmt.Fprintf(e.stderr, "tidings cancel: %s is %s, not pending: nothing cancelled\n", id, after.State)
		return exitNone
	}
	if !cn.json {
		fmt.Fprintf(e.stdout, "cancelled %s\n", id)
	}
	return exitOK
}
