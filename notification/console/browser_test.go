package console_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// screenshots is where TestScreenshots writes its pictures; "" writes
// none. README's are made with
//
//	scripts/test.sh -run TestScreenshots ./notification/console/ -args -screenshots "$PWD/docs"
var screenshots = flag.String("screenshots", "", "write the console's screenshots to this directory")

// browser is a headless Chromium of the test's own, with a fresh profile.
type browser struct {
	ctx context.Context
}

// newBrowser starts Chromium for the test, stopped when it ends. It fails
// the test, saying how to install it, when Chromium is missing.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("Chromium is not installed, and the console's browser tests need it: run scripts/ensure-chromium.sh "+
			"(on Debian: apt-get install chromium chromium-driver): %v", err)
	}
	dir := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(dir),
		// Its temporary files too: the directory of its singleton socket
		// outlives a browser that is stopped rather than closed.
		chromedp.Env("TMPDIR="+dir),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1280, 800),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first run starts the browser and binds its life to ctx, which
	// therefore has no deadline of its own: the wait has one, longer than
	// testwait's, since a cold Chromium took more than 30 s to start on
	// the 2-core machine while other packages' race tests ran beside it.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	require.NoError(t, testwait.RecvWithin(t, started, 2*time.Minute, "Chromium to start"), "start Chromium at %s", path)
	return &browser{ctx: ctx}
}

// do runs steps within testwait.Within, and fails the test, saying what
// they were for, when they fail.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testwait.Within)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...), what)
}

// get runs a, within testwait.Within, and returns its value.
func get[T any](t *testing.T, b *browser, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testwait.Within)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(t, err)
	return v
}

// text returns the text of the first element sel selects.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	return get(t, b, chromedp.Text(chromedp.CSS(sel)))
}

// TestBrowser is an operator's round trip in a real browser: a request
// dies, the operator opens its group, re-emits it once the cause is
// fixed, and sees it delivered on its own page.
func TestBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	id := b.dead(t, relay.WithCorrelationID(t.Context(), "booking-7"))
	s := b.serve(t, nil)
	br := newBrowser(t)

	br.do(t, "open the dead group",
		chromedp.Navigate(s.base+"/"),
		chromedp.Click(chromedp.CSS(`a[href="/dead"]`), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(`section.group`)),
	)
	require.Contains(t, br.text(t, "main"), "recipient.invalid 1")
	br.do(t, "open the list of its requests",
		chromedp.Click(chromedp.CSS(`a[href="/dead/list?code=recipient.invalid"]`), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(`table.dead-list`)),
	)
	list := br.text(t, "table.dead-list")
	require.Contains(t, list, "+1500*****01", "the number, masked")
	require.NotContains(t, list, invalidNumber)

	// The cause is fixed: the provider now takes the number.
	b.delivery.ScriptRecipient(invalidNumber, delivery.DeliveredWithReference("SM-fixed-7"))
	br.do(t, "re-emit the selected request",
		chromedp.Click(chromedp.CSS(`input[name=id][value="`+id.String()+`"]`), chromedp.NodeVisible),
		chromedp.Click(chromedp.CSS(`button[value=selected]`), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	)
	require.Equal(t, "Re-emitted 1 request.", br.text(t, "p.flash"))
	require.Equal(t, relay.StateProcessed, b.settled(t, id).State)

	br.do(t, "search the request's id",
		chromedp.SendKeys(chromedp.CSS(`#q`), id.String()+"\n"),
		chromedp.WaitVisible(chromedp.CSS(`table.timeline`)),
	)
	require.Equal(t, "processed", br.text(t, "h1 .state"))
	require.Contains(t, br.text(t, "dl.facts"), "SM-fixed-7", "the provider's reference")
	timeline := br.text(t, "table.timeline")
	for _, event := range []string{"staged", "dead", "reemitted", "done"} {
		require.Contains(t, timeline, event)
	}
	require.NotContains(t, timeline, invalidNumber)
}

// TestScreenshots fills a console with what a day of the bookings demo
// leaves and opens each page in the browser: with -screenshots DIR it
// writes a picture of each there.
func TestScreenshots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t)
	ids := stageDemo(t, b)
	s := b.serve(t, nil)
	br := newBrowser(t)

	for _, p := range []struct{ name, path, ready string }{
		{"overview", "/", "table"},
		{"dead", "/dead", "section.group"},
		{"dead-list", "/dead/list?code=provider.rejected", "table.dead-list"},
		{"request", "/requests/" + ids.reemitted.String(), "table.timeline"},
		{"search", "/search?q=booking-1002", "table"},
	} {
		br.do(t, "open "+p.path, chromedp.Navigate(s.base+p.path), chromedp.WaitVisible(chromedp.CSS(p.ready)))
		// A Content-Security-Policy that refused the style sheet would
		// leave the page without rules.
		require.True(t, get(t, br, chromedp.Evaluate[bool](
			`document.styleSheets.length === 1 && document.styleSheets[0].cssRules.length > 20`)), "styled: %s", p.path)
		if p.name == "dead-list" {
			require.True(t, get(t, br, chromedp.Evaluate[bool](
				`document.querySelector("thead th.check input[type=checkbox]") !== null`)),
				"the script added a select-all box to the dead list")
		}
		png := get(t, br, chromedp.FullScreenshot(100))
		if *screenshots != "" {
			require.NoError(t, os.WriteFile(filepath.Join(*screenshots, "console-"+p.name+".png"), png, 0o644))
		}
	}
}

// demoIDs are requests of stageDemo that a screenshot shows.
type demoIDs struct {
	reemitted uuid.UUID // an SMS that died of an invalid number, re-emitted and delivered
}

// stageDemo stages what the bookings demo's day leaves: bookings
// confirmed by mail, push, SMS and in-app, reminders scheduled for later,
// push tokens the provider no longer knows, a mail server that kept
// refusing, an invalid number re-emitted once corrected, and receipts of
// a module whose relay is not running.
func stageDemo(t *testing.T, b testBundle) demoIDs {
	t.Helper()
	drivers := []struct{ email, phone, token string }{
		{"ada@drivers.example", "+15005550006", "ExponentPushToken[ada-device]"},
		{"alan@drivers.example", "+15005550007", "ExponentPushToken[alan-device]"},
		{"grace@drivers.example", "+15005550008", "ExponentPushToken[grace-device]"},
	}
	b.delivery.ScriptRecipient(drivers[1].token, delivery.Reject(delivery.WithCode(delivery.CodeRejected,
		errorString("expo: DeviceNotRegistered: the device cannot receive push notifications anymore"))))
	b.delivery.ScriptRecipient(drivers[2].token, delivery.Reject(delivery.WithCode(delivery.CodeRejected,
		errorString("expo: DeviceNotRegistered: the device cannot receive push notifications anymore"))))
	b.delivery.ScriptRecipient(drivers[2].email,
		delivery.Retry(errorString("smtp: 421 4.7.0 try again later")), delivery.Retry(errorString("smtp: 421 4.7.0 try again later")))
	var settle []uuid.UUID
	for i, d := range drivers {
		ctx := relay.WithCorrelationID(t.Context(), fmt.Sprintf("booking-%d", 1001+i))
		data := map[string]any{"booking_id": 1001 + i}
		settle = append(settle, b.stage(t, ctx,
			notification.Request{Channel: "mail", Recipient: d.email, Template: "booking_confirmed", Data: data},
			notification.Request{Channel: "push", Recipient: d.token, Template: "booking_confirmed", Data: data},
			notification.Request{Channel: "sms", Recipient: d.phone, Template: "booking_confirmed", Data: data},
			notification.Request{Channel: "inapp", Recipient: "driver-" + d.email[:strings.Index(d.email, "@")], Template: "booking_confirmed", Data: data},
		)...)
		b.stage(t, ctx,
			notification.Request{Channel: "mail", Recipient: d.email, Template: "pickup_reminder", Data: data, NotBefore: time.Now().Add(20 * time.Hour)},
			notification.Request{Channel: "push", Recipient: d.token, Template: "pickup_reminder", Data: data, NotBefore: time.Now().Add(20 * time.Hour)})
	}
	for _, id := range settle {
		b.settled(t, id)
	}
	reemitted := b.dead(t, relay.WithCorrelationID(t.Context(), "booking-1004"))
	b.delivery.ScriptRecipient(invalidNumber, delivery.DeliveredWithReference("SM5f0c2e51d6a84b7c9e0f1a2b3c4d5e6f"))
	n, err := b.client.Reemit(t.Context(), &notification.DeadFilter{IDs: []uuid.UUID{reemitted}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, relay.StateProcessed, b.settled(t, reemitted).State)

	// Receipts of a module whose relay is stopped: due, and waiting.
	for i := range 4 {
		_, err := b.client.Stage(t.Context(), b.db, "payments", notification.Request{Channel: "mail",
			Recipient: drivers[i%3].email, Template: "receipt", Data: map[string]any{"payment_id": 5001 + i}})
		require.NoError(t, err)
	}
	return demoIDs{reemitted: reemitted}
}
