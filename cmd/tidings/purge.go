package main

import (
	"context"
	"fmt"

	"github.com/tidings-go/tidings/notification"
)

var purgeCommand = &command{
	name:    "purge",
	args:    "",
	summary: "delete delivered and cancelled requests older than an age",
	about: `Deletes the delivered and cancelled requests settled more than
--older-than ago, with their timelines, 1,000 per statement. Pending and
dead requests are never purged. The relay purges on its own after its
Retention (7 days by default); this is for a one-off, such as after a
backlog drained.`,
	examples: `  tidings purge --older-than 7d
  tidings purge --older-than 36h --json`,
	run: runPurge,
}

func runPurge(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	olderThan := fs.String("older-than", "", "delete what settled longer ago than this `age`: 90m, 36h, 7d (required)")
	if code, ok := c.parseFlags(e, fs, args); !ok {
		return code
	}
	if *olderThan == "" {
		return c.usageError(e, "--older-than is required")
	}
	age, err := parseAge(*olderThan)
	if err != nil || age == 0 {
		return c.usageError(e, "--older-than %q: want a positive age such as 90m, 36h or 7d", *olderThan)
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	n, err := s.client.Purge(ctx, age)
	if err != nil {
		return c.fail(e, err)
	}
	if cn.json {
		if err := writeJSON(e.stdout, struct {
			Purged int64 `json:"purged"`
		}{n}); err != nil {
			return c.fail(e, err)
		}
		return exitOK
	}
	fmt.Fprintf(e.stdout, "purged %d delivered or cancelled requests settled more than %s ago\n", n, *olderThan)
	return exitOK
}
