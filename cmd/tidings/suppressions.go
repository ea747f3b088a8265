package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tidings-go/tidings/notification"
)

var suppressionsCommand = &command{
	name:    "suppressions",
	args:    "",
	summary: "list suppressed addresses",
	about: `Lists the addresses no request goes to: bounced, complained about,
unsubscribed, push tokens a provider reported unregistered, and those the
application suppressed. Each says its channel, its scope ("" for every
category), its class and reason, the provider and report that suppressed
it, and since when. A page at a time (--limit; the next page starts
--after the last row of this one, written channel/scope/address).

Addresses are personal data: they are shown only with --show-addresses,
and so is the next page's cursor (next_after in --json), which holds one.
--address finds one address (normalised as suppressions are: a mail
address lower-cased) and shows it, since you named it.

Exit code 3 when no suppression matches.`,
	examples: `  tidings suppressions
  tidings suppressions --channel push --show-addresses --json
  tidings suppressions --channel mail --address ada@example.com`,
	run: runSuppressions,
}

var liftCommand = &command{
	name:    "lift",
	args:    "ADDRESS",
	summary: "lift the suppression of an address",
	about: `Removes the suppression of ADDRESS on --channel in --scope ("" for the one
of every category): requests to it go out again from now on; those that
ended suppressed stay so (re-emit none: stage anew). Lift any suppression
only once the cause is gone: a bounced mailbox that exists again, a
complaint settled with the person.

Exit code 3 when the address was not suppressed in that scope.`,
	examples: `  tidings lift --channel mail ada@example.com
  tidings lift --channel sms --scope marketing +14155550100`,
	run: runLift,
}

// suppressionView is a suppression as the command shows it: with its
// address only when the user may see it.
type suppressionView struct {
	Channel   string    `json:"channel"`
	Address   string    `json:"address,omitempty"` // only with --show-addresses or --address
	Scope     string    `json:"scope"`
	Class     string    `json:"class"`
	Reason    string    `json:"reason"`
	Provider  string    `json:"provider,omitempty"`
	Source    string    `json:"source,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

func runSuppressions(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	channel := fs.String("channel", "", "only this `channel`'s")
	address := fs.String("address", "", "only this `address` (needs --channel)")
	limit := fs.Int("limit", notification.SuppressionsLimitDefault, "most rows of a page")
	after := fs.String("after", "", "start the page after this `row`: channel/scope/address, the last of the previous page")
	show := fs.Bool("show-addresses", false, "show addresses (personal data)")
	if code, ok := c.parseFlags(e, fs, args); !ok {
		return code
	}
	if *address != "" && *channel == "" {
		return c.usageError(e, "--address needs --channel")
	}
	if *limit < 1 || *limit > notification.SuppressionsLimitMax {
		return c.usageError(e, "--limit %d: want 1 to %d", *limit, notification.SuppressionsLimitMax)
	}
	f := &notification.SuppressionFilter{Channel: *channel, Address: *address, Limit: *limit}
	if *after != "" {
		parts := strings.SplitN(*after, "/", 3)
		if len(parts) != 3 {
			return c.usageError(e, "--after %q: want channel/scope/address", *after)
		}
		f.After = &notification.Suppression{Channel: parts[0], Scope: parts[1], Address: parts[2]}
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	page, err := s.client.Suppressions(ctx, f)
	if err != nil {
		return c.fail(e, err)
	}
	shown := *show || *address != ""
	views := make([]suppressionView, len(page))
	for i, sp := range page {
		views[i] = suppressionView{Channel: sp.Channel, Scope: sp.Scope, Class: string(sp.Class), Reason: sp.Reason,
			Provider: sp.Provider, Source: sp.Source, CreatedAt: sp.CreatedAt}
		if shown {
			views[i].Address = sp.Address
		}
	}
	var next string // the cursor: the last row, address and all
	if len(page) == *limit && shown {
		last := page[len(page)-1]
		next = last.Channel + "/" + last.Scope + "/" + last.Address
	}
	if cn.json {
		err = writeJSON(e.stdout, struct {
			Suppressions []suppressionView `json:"suppressions"`
			NextAfter    string            `json:"next_after,omitempty"`
		}{views, next})
	} else {
		err = printSuppressions(e.stdout, views, shown)
	}
	if err != nil {
		return c.fail(e, err)
	}
	switch {
	case len(page) == *limit && !shown:
		fmt.Fprintln(e.stderr, "more may follow: a page's cursor is its last address, so the next page needs --show-addresses")
	case next != "" && !cn.json:
		fmt.Fprintln(e.stderr, "more may follow: add --after with the last row (--json shows it as next_after)")
	}
	return exitIfNone(len(views))
}

// printSuppressions writes suppressions as a table, with an address
// column when shown.
func printSuppressions(w io.Writer, views []suppressionView, shown bool) error {
	header := []string{"CHANNEL", "SCOPE", "CLASS", "REASON", "PROVIDER", "SINCE"}
	if shown {
		header = append(header, "ADDRESS")
	}
	t := newTable(w, header...)
	for _, v := range views {
		row := []string{v.Channel, orDash(v.Scope), v.Class, v.Reason, orDash(v.Provider), stamp(v.CreatedAt)}
		if shown {
			row = append(row, v.Address)
		}
		t.row(row...)
	}
	return t.flush()
}

func runLift(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	channel := fs.String("channel", "", "the `channel` of the address (required)")
	scope := fs.String("scope", "", "the `category` suppressed; empty for every category")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(e, "want one ADDRESS")
	}
	if *channel == "" {
		return c.usageError(e, "--channel is required")
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	lifted, err := s.client.Lift(ctx, nil, *channel, pos[0], *scope)
	if err != nil {
		return c.fail(e, err)
	}
	if cn.json {
		if err := writeJSON(e.stdout, struct {
			Lifted bool `json:"lifted"`
		}{lifted}); err != nil {
			return c.fail(e, err)
		}
	}
	if !lifted {
		fmt.Fprintf(e.stderr, "tidings lift: the address is not suppressed on %s in scope %q: nothing lifted\n", *channel, *scope)
		return exitNone
	}
	if !cn.json {
		fmt.Fprintf(e.stdout, "lifted the suppression on %s in scope %q\n", *channel, *scope)
	}
	return exitOK
}
