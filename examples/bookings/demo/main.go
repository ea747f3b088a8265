// Command demo runs the booking service end to end on this machine: a
// throwaway PostgreSQL (unless DATABASE_URL names one), a local SMTP server
// and local Expo and Twilio stand-ins (each as strict about credentials as
// its provider), the service itself, and a client that confirms a handful
// of bookings through its HTTP API, with recipient rules set: a host who
// turned push off for bookings, a driver who turned everything off, a
// driver's quiet hours, a double click. It prints what
// became of each notification and what each channel received, two
// security notices that go whatever the rules say (one with a verification
// code that is gone from the database once sent), the one notification
// that died (an invalid phone number) with its reason, and its re-emit
// once the number is corrected. Then the providers report back, signed, to
// the receivers the service mounts: a mail that bounced for good, a push
// token whose app is gone (from Expo's receipts), a STOP and a START by
// text; and the notifications after each end suppressed without a
// provider call, until the START.
// It stops everything it started before it exits.
//
//	go run ./examples/bookings/demo
package main

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/examples/bookings/internal/service"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/feedback"
)

// quietFor is how long ada's quiet window lasts after the quiet hours are
// set: her booking's text must be handed before it ends, which a loaded
// machine may take seconds to do, and the demo waits for it to end.
const quietFor = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Fprint(out, "starting a throwaway PostgreSQL... ")
		started := time.Now()
		cluster, err := pgtemp.Start(ctx, &pgtemp.Options{Durable: true})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "started in %s\n", time.Since(started).Round(100*time.Millisecond))
		defer func() { err = errors.Join(err, cluster.Stop()) }()
		dsn = cluster.URL()
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := checkUnused(ctx, db); err != nil {
		return err
	}

	// The story runs until the service stops or a stand-in refuses a
	// call: either halts it at once, and is what the demo reports first.
	storyCtx, halt := context.WithCancelCause(ctx)
	defer halt(nil)
	prov, err := startProviders(halt)
	if err != nil {
		return err
	}
	defer prov.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	prov.service = "http://" + ln.Addr().String()
	channels, err := service.Providers{
		SMTPAddr: prov.smtpAddr, MailFrom: "Parking <no-reply@parking.example>", SMTPUser: smtpUser, SMTPPassword: smtpPassword,
		PushURL: prov.expo.URL, PushAccessToken: expoToken,
		SMSURL: prov.twilio.URL, SMSAccountSID: twilioSID, SMSAuthToken: twilioToken, SMSFrom: twilioFrom,
		SMSStatusCallback: prov.service + "/feedback/twilio",
	}.Channels()
	if err != nil {
		ln.Close()
		return err
	}
	// Expo's receipts are fetched a second after each push, not the
	// fifteen minutes Expo advises, so that the demo shows them.
	receipts, err := feedback.NewExpo(&feedback.ExpoConfig{BaseURL: prov.expo.URL, AccessToken: expoToken})
	if err != nil {
		ln.Close()
		return err
	}
	reports := service.Feedback{ResendSecrets: []string{resendSecret},
		TwilioURL: prov.service + "/feedback/twilio", TwilioAuthTokens: []string{twilioToken},
		PushReceipts: receipts, ReceiptsAfter: time.Second}

	svcCtx, stopService := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		err := service.Run(svcCtx, service.Config{DB: db, DSN: dsn, Channels: channels, Feedback: reports, Logger: logger,
			QuietHoursJitter: 200 * time.Millisecond}, ln)
		halt(errors.New("the service stopped"))
		served <- err
	}()

	c := &client{base: "http://" + ln.Addr().String()}
	storyErr := story(storyCtx, out, c, prov, db)
	halted := context.Cause(storyCtx) // taken before the service is stopped
	stopService()
	if err := <-served; err != nil {
		return errors.Join(fmt.Errorf("the service: %w", err), storyErr)
	}
	if halted != nil && halted != context.Cause(ctx) {
		return errors.Join(halted, storyErr)
	}
	return storyErr
}

// story is what a user of the API does, and what the demo shows of it.
func story(ctx context.Context, out io.Writer, c *client, prov *providers, db *sql.DB) error {
	users := []service.User{
		{ID: "ada", Name: "Ada", Email: "ada@drivers.example", Phone: "+15005550006", PushToken: "ExponentPushToken[ada-device]"},
		{ID: "grace", Name: "Grace", Email: "grace@drivers.example", Phone: invalidNumber, PushToken: "ExponentPushToken[grace-device]"},
		{ID: "alan", Name: "Alan", Email: "alan@drivers.example", Phone: "+15005550007", PushToken: "ExponentPushToken[alan-device]"},
		{ID: "hopper", Name: "Hopper Parking", Email: "hosts@hopper.example", Phone: "+15005550008", PushToken: "ExponentPushToken[hopper]"},
	}
	for _, u := range users {
		if err := c.do(ctx, http.MethodPost, "/users", u, nil); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "\n== recipient rules, set through the API")
	if err := c.do(ctx, http.MethodPut, "/users/hopper/preferences",
		notification.Preference{Category: "booking", Channel: "push", Enabled: false}, nil); err != nil {
		return err
	}
	fmt.Fprintln(out, "hopper turned push off for bookings")
	if err := c.do(ctx, http.MethodPut, "/users/alan/preferences", notification.Preference{Enabled: false}, nil); err != nil {
		return err
	}
	fmt.Fprintln(out, "alan turned every notification off")
	// Ada's quiet window began a minute ago and ends in quietFor, so that
	// the demo shows its end. The dispatcher reads the database's clock,
	// so the window does too.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		return err
	}
	var now time.Time
	if err := db.QueryRowContext(ctx, `SELECT now()`).Scan(&now); err != nil {
		return err
	}
	now = now.In(berlin)
	quietEnd := now.Add(quietFor)
	if err := c.do(ctx, http.MethodPut, "/users/ada/quiet-hours", notification.QuietHours{TimeZone: "Europe/Berlin",
		Windows: []notification.QuietWindow{{Start: notification.TimeOfDayOf(now.Add(-time.Minute)),
			End: notification.TimeOfDayOf(quietEnd), Channels: []string{"sms"}}}}, nil); err != nil {
		return err
	}
	fmt.Fprintf(out, "ada's texts are quiet until %s (Europe/Berlin)\n", quietEnd.Format(time.TimeOnly))

	fmt.Fprintln(out, "\n== confirming bookings through the HTTP API")
	var staged []uuid.UUID
	var first service.Booking
	for i, driver := range []string{"ada", "grace", "alan"} {
		var b service.Booking
		err := c.do(ctx, http.MethodPost, "/bookings", service.Booking{DriverID: driver, HostID: "hopper",
			Place: fmt.Sprintf("Lot %c, space %d", 'A'+i, 10+i), StartsAt: time.Date(2026, 12, 1+i, 9, 0, 0, 0, time.UTC)}, &b)
		if err != nil {
			return err
		}
		if i == 0 {
			first = b
		}
		ids, took, err := c.confirm(ctx, b.ID)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "booking %d for %s confirmed in %s: %d notifications staged in the same transaction\n",
			b.ID, driver, took.Round(time.Millisecond), len(ids))
		staged = append(staged, ids...)
	}
	again, _, err := c.confirm(ctx, first.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "booking %d confirmed again (a double click): %d more staged, under the same dedup keys\n", first.ID, len(again))
	staged = append(staged, again...)

	outcomes := map[string]int{}
	byReference := map[string]uuid.UUID{} // the requests delivered, by the provider's reference
	var adaSMS, dup *status
	for _, id := range staged {
		st, err := c.waitSettled(ctx, id)
		if err != nil {
			return err
		}
		outcomes[cmp.Or(st.Outcome, st.State)]++
		if st.Outcome == "delivered" {
			byReference[st.Reference] = st.ID
		}
		switch {
		case st.Channel == "sms" && st.Outcome == "delivered" && slices.ContainsFunc(st.Timeline, func(e entry) bool {
			return e.Code == notification.CodeQuietHours
		}):
			adaSMS = &st
		case st.Outcome == "duplicate" && dup == nil:
			dup = &st
		}
	}
	fmt.Fprintln(out, "\n== what became of them")
	fmt.Fprintf(out, "delivered %d, skipped %d (alan's, and hopper's pushes), duplicate %d, dead %d\n",
		outcomes["delivered"], outcomes["skipped"], outcomes["duplicate"], outcomes["dead"])
	if dup != nil {
		fmt.Fprintf(out, "duplicate %s: of %v, the first receipt %s\n", dup.ID, dup.Timeline[len(dup.Timeline)-1].Detail["duplicate_of"], dup.Reference)
	}
	if adaSMS != nil {
		for _, e := range adaSMS.Timeline {
			if e.Code == notification.CodeQuietHours {
				fmt.Fprintf(out, "ada's booking text: deferred at %s by quiet hours %v until %v\n",
					e.At.In(berlin).Format(time.TimeOnly), e.Detail["window"], e.Detail["until"])
			}
		}
		last := adaSMS.Timeline[len(adaSMS.Timeline)-1]
		fmt.Fprintf(out, "ada's booking text: delivered at %s\n", last.At.In(berlin).Format(time.TimeOnly))
	}

	mails, pushes, texts := prov.received()
	fmt.Fprintln(out, "\n== what each channel received")
	fmt.Fprintf(out, "mail  %d:\n", len(mails))
	for _, m := range mails {
		fmt.Fprintln(out, "      ", m)
	}
	fmt.Fprintf(out, "push  %d (tickets %v)\n", len(pushes), pushes)
	fmt.Fprintf(out, "sms   %d (to %v)\n", len(texts), texts)
	keys, _ := prov.sent()
	for emailID, key := range keys {
		if id, ok := byReference[emailID]; !ok || key != id.String() {
			return fmt.Errorf("mail %s carried %s %q, not the id of the request delivered as it (%s)",
				emailID, service.MailIdempotencyHeader, key, id)
		}
	}
	fmt.Fprintf(out, "each mail carried its request's id as %s, for Resend to drop a repeat\n", service.MailIdempotencyHeader)
	for _, u := range []string{"ada", "grace", "alan", "hopper"} {
		var inbox []struct {
			Template string `json:"Template"`
		}
		if err := c.do(ctx, http.MethodGet, "/users/"+u+"/notifications", nil, &inbox); err != nil {
			return err
		}
		fmt.Fprintf(out, "inapp %s: %d\n", u, len(inbox))
	}

	fmt.Fprintln(out, "\n== security notices")
	st, err := c.stageAndWait(ctx, "/users/alan/password-changed")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "password-changed mail to alan, who turned everything off: %s\n", st.Outcome)
	if st, err = c.stageAndWait(ctx, "/users/ada/verify-phone"); err != nil {
		return err
	}
	text, _ := prov.textBody(st.Reference)
	m := verificationText.FindStringSubmatch(text)
	if m == nil {
		return fmt.Errorf("the verification text (%s, %s) is %q, not a six-digit code", st.Outcome, st.Reference, text)
	}
	code := m[1]
	rows, err := rowsHolding(ctx, db, code, tidings.SchemaDefault, "bookings")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "verification code to ada: %s, the text carried a %d-digit code; rows in the database holding it now: %d\n",
		st.Outcome, len(code), rows)

	fmt.Fprintln(out, "\n== dead notifications")
	var dead []struct {
		ID     uuid.UUID `json:"id"`
		Reason string    `json:"reason"`
	}
	if err := c.do(ctx, http.MethodGet, "/admin/dead", nil, &dead); err != nil {
		return err
	}
	if len(dead) != 1 {
		return fmt.Errorf("want one dead notification, have %d", len(dead))
	}
	fmt.Fprintf(out, "%s: %s\n", dead[0].ID, dead[0].Reason)

	fmt.Fprintln(out, "\n== correcting grace's number and re-emitting it")
	if err := c.do(ctx, http.MethodPut, "/users/grace/phone", map[string]string{"phone": "+15005550009"}, nil); err != nil {
		return err
	}
	if err := c.do(ctx, http.MethodPost, "/admin/dead/"+dead[0].ID.String()+"/reemit", nil, nil); err != nil {
		return err
	}
	if st, err = c.waitSettled(ctx, dead[0].ID); err != nil {
		return err
	}
	_, _, texts = prov.received()
	fmt.Fprintf(out, "%s: %s (provider reference %s); sms received %d (to %v)\n", dead[0].ID, st.State, st.Reference, len(texts), texts)

	return reports(ctx, out, c, prov, byReference)
}

// reports is what the providers report back about what they delivered,
// each posted or fetched as the real provider does it, and what becomes
// of the next notification to each address.
func reports(ctx context.Context, out io.Writer, c *client, prov *providers, byReference map[string]uuid.UUID) error {
	fmt.Fprintln(out, "\n== providers' reports, signed, to the service's receivers")
	// Grace's mailbox is gone: Resend reports the bounce of the booking
	// mail it accepted for her.
	emailID, code, err := prov.bounce(ctx, "grace@drivers.example")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "resend: grace's booking mail %s bounced (Permanent); email.bounced, signed with Svix, posted to /feedback/resend: %d\n",
		emailID, code)
	sp, err := c.waitSuppression(ctx, "mail", "grace@drivers.example", true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "mail to %s suppressed (class %s, reason %s, reported by %s)\n", sp.Address, sp.Class, sp.Reason, sp.Provider)
	original, ok := byReference[emailID]
	if !ok {
		return fmt.Errorf("no request was delivered with the reference %s", emailID)
	}
	st, err := c.status(ctx, original)
	if err != nil {
		return err
	}
	for _, e := range st.Timeline {
		if e.Event == "feedback" {
			fmt.Fprintf(out, "the bounced mail's request %s: its timeline notes %s %s (%v %v)\n",
				st.ID, e.Event, e.Code, e.Detail["provider"], e.Detail["type"])
		}
	}
	mails, pushes, texts := prov.received()
	if st, err = c.stageAndWait(ctx, "/users/grace/password-changed"); err != nil {
		return err
	}
	after, _, _ := prov.received()
	fmt.Fprintf(out, "password-changed mail to grace: %s (%s); the SMTP server received %s\n",
		st.Outcome, st.Code, news(len(after)-len(mails), "message", "messages"))

	// Grace's phone no longer has the app: Expo's receipt of the push it
	// accepted says so.
	if sp, err = c.waitSuppression(ctx, "push", noApp, true); err != nil {
		return err
	}
	fmt.Fprintf(out, "expo: the receipt of %s, fetched a second after the push, says DeviceNotRegistered\n", sp.Source)
	fmt.Fprintf(out, "push to %s suppressed (class %s, reason %s, reported by %s)\n", sp.Address, sp.Class, sp.Reason, sp.Provider)
	var b service.Booking
	if err := c.do(ctx, http.MethodPost, "/bookings", service.Booking{DriverID: "grace", HostID: "hopper",
		Place: "Lot D, space 13", StartsAt: time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)}, &b); err != nil {
		return err
	}
	ids, _, err := c.confirm(ctx, b.ID)
	if err != nil {
		return err
	}
	settled := make([]status, len(ids))
	for i, id := range ids {
		if settled[i], err = c.waitSettled(ctx, id); err != nil {
			return err
		}
	}
	// The ids are in the order of service.confirmations: the driver's
	// mail, push and text first.
	_, morePushes, _ := prov.received()
	fmt.Fprintf(out, "booking %d for grace confirmed: her push %s (%s), her mail %s, her text %s; Expo received %s\n",
		b.ID, settled[1].Outcome, settled[1].Code, settled[0].Outcome, settled[2].Outcome, news(len(morePushes)-len(pushes), "push", "pushes"))

	// Alan texts STOP, then START: Twilio posts each to the number's
	// messaging webhook.
	_, _, texts = prov.received()
	const alan = "+15005550007"
	if code, err = prov.textIn(ctx, alan, "STOP"); err != nil {
		return err
	}
	fmt.Fprintf(out, "twilio: alan texted STOP; the incoming message, signed, posted to /feedback/twilio: %d\n", code)
	if sp, err = c.waitSuppression(ctx, "sms", alan, true); err != nil {
		return err
	}
	fmt.Fprintf(out, "sms to %s suppressed (class %s, reason %s, reported by %s)\n", sp.Address, sp.Class, sp.Reason, sp.Provider)
	if st, err = c.stageAndWait(ctx, "/users/alan/verify-phone"); err != nil {
		return err
	}
	_, _, moreTexts := prov.received()
	fmt.Fprintf(out, "verification code to alan: %s (%s); Twilio received %s\n", st.Outcome, st.Code, news(len(moreTexts)-len(texts), "text", "texts"))
	if code, err = prov.textIn(ctx, alan, "START"); err != nil {
		return err
	}
	fmt.Fprintf(out, "twilio: alan texted START, posted to /feedback/twilio: %d\n", code)
	if _, err = c.waitSuppression(ctx, "sms", alan, false); err != nil {
		return err
	}
	fmt.Fprintf(out, "sms to %s no longer suppressed\n", alan)
	if st, err = c.stageAndWait(ctx, "/users/alan/verify-phone"); err != nil {
		return err
	}
	_, _, moreTexts = prov.received()
	fmt.Fprintf(out, "verification code to alan: %s (provider reference %s); Twilio received %s\n",
		st.Outcome, st.Reference, news(len(moreTexts)-len(texts), "text", "texts"))

	_, callbacks := prov.sent()
	for i, cb := range callbacks {
		if cb != prov.service+"/feedback/twilio" {
			return fmt.Errorf("text %d carried the StatusCallback %q, not the service's /feedback/twilio", i+1, cb)
		}
	}
	fmt.Fprintf(out, "each of the %d texts named the service's /feedback/twilio as its StatusCallback\n", len(callbacks))
	return nil
}

// news says how many new things arrived: "no new text", "1 new text",
// "2 new texts".
func news(n int, one, many string) string {
	switch n {
	case 0:
		return "no new " + one
	case 1:
		return "1 new " + one
	}
	return fmt.Sprintf("%d new %s", n, many)
}

// verificationText is the text of a verification code (the service's
// verify_phone template), and the code: exactly six digits.
var verificationText = regexp.MustCompile(`^Your parking verification code is ([0-9]{6})\.$`)

// rowsHolding counts the rows of the tables of schemas that hold code
// where a leaked code would be: as a whole number (not beside another
// digit, nor after a '.', as the microseconds of a time are) in a text,
// varchar, json or jsonb column, or as those bytes, beside no digit, in a
// bytea. Times, numbers and uuids are not searched: a six-digit run in
// them is no code.
func rowsHolding(ctx context.Context, db *sql.DB, code string, schemas ...string) (int, error) {
	rows, err := db.QueryContext(ctx, `SELECT format('%I.%I', c.table_schema, c.table_name),
			string_agg(CASE WHEN c.data_type = 'bytea' THEN format('encode(%I, ''hex'') ~ p.as_bytes', c.column_name)
				ELSE format('%I::text ~ p.as_text', c.column_name) END, ' OR ')
		FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.table_schema = ANY($1) AND t.table_type = 'BASE TABLE'
			AND c.data_type IN ('text', 'character varying', 'json', 'jsonb', 'bytea')
		GROUP BY 1`, pq.Array(schemas))
	if err != nil {
		return 0, err
	}
	searches := map[string]string{} // the condition of each table
	for rows.Next() {
		var table, cond string
		if err := rows.Scan(&table, &cond); err != nil {
			rows.Close()
			return 0, err
		}
		searches[table] = cond
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// In hex, a byte that is no digit is anything but 30 to 39; the
	// leading (..)* keeps the match on a byte boundary.
	const other = `(?:[0-24-9a-f][0-9a-f]|3[a-f])`
	asText := `(?:^|[^0-9.])` + code + `(?:[^0-9]|$)`
	asBytes := `^(?:(?:..)*` + other + `)?` + hex.EncodeToString([]byte(code)) + `(?:` + other + `|$)`
	n := 0
	for table, cond := range searches {
		var k int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table+`, (SELECT $1::text AS as_text, $2::text AS as_bytes) p WHERE `+cond,
			asText, asBytes).Scan(&k); err != nil {
			return 0, fmt.Errorf("search %s: %w", table, err)
		}
		n += k
	}
	return n, nil
}

// client calls the service's HTTP API.
type client struct{ base string }

func (c *client) do(ctx context.Context, method, path string, body, into any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if into == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// status is what the demo reads of a notification's status.
type status struct {
	ID        uuid.UUID
	State     string
	Outcome   string
	Code      string
	Channel   string
	Reference string
	Reason    string
	Timeline  []entry
}

// entry is a timeline entry.
type entry struct {
	At     time.Time
	Event  string
	Code   string
	Detail map[string]any
}

// suppression is what the demo reads of a suppression.
type suppression struct {
	Address  string `json:"address"`
	Class    string `json:"class"`
	Reason   string `json:"reason"`
	Provider string `json:"provider"`
	Source   string `json:"source"`
}

// waitSuppression polls the suppressions of channel until address is
// suppressed, when want is true, or no longer, and returns its
// suppression.
func (c *client) waitSuppression(ctx context.Context, channel, address string, want bool) (suppression, error) {
	for {
		var list []suppression
		if err := c.do(ctx, http.MethodGet, "/admin/suppressions?channel="+channel, nil, &list); err != nil {
			return suppression{}, err
		}
		i := slices.IndexFunc(list, func(s suppression) bool { return s.Address == address })
		switch {
		case want && i >= 0:
			return list[i], nil
		case !want && i < 0:
			return suppression{}, nil
		}
		select {
		case <-ctx.Done():
			return suppression{}, fmt.Errorf("%s %s: still not as awaited: %w", channel, address, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// status reads the notification's status.
func (c *client) status(ctx context.Context, id uuid.UUID) (status, error) {
	var st status
	err := c.do(ctx, http.MethodGet, "/notifications/"+id.String(), nil, &st)
	return st, err
}

// confirm confirms booking id and returns the notifications it staged and
// how long the call took.
func (c *client) confirm(ctx context.Context, id int64) ([]uuid.UUID, time.Duration, error) {
	start := time.Now()
	var confirmed struct {
		Notifications []uuid.UUID `json:"notifications"`
	}
	err := c.do(ctx, http.MethodPost, fmt.Sprintf("/bookings/%d/confirm", id), nil, &confirmed)
	return confirmed.Notifications, time.Since(start), err
}

// stageAndWait posts to path, which stages a notification, and waits
// until it is settled.
func (c *client) stageAndWait(ctx context.Context, path string) (status, error) {
	var staged struct {
		Notification uuid.UUID `json:"notification"`
	}
	if err := c.do(ctx, http.MethodPost, path, nil, &staged); err != nil {
		return status{}, err
	}
	return c.waitSettled(ctx, staged.Notification)
}

// waitSettled polls the notification's status until it is settled.
func (c *client) waitSettled(ctx context.Context, id uuid.UUID) (status, error) {
	for {
		st, err := c.status(ctx, id)
		if err != nil {
			return st, err
		}
		if st.State != "pending" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("notification %s still pending: %w", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkUnused refuses a database that holds an earlier run's users: the
// story's steps (a bounce suppresses grace's address for good) would not
// happen again there.
func checkUnused(ctx context.Context, db *sql.DB) error {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('bookings.users') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return err
	}
	var users int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM bookings.users`).Scan(&users); err != nil {
		return err
	}
	if users > 0 {
		return errors.New("the database holds an earlier demo run's users (bookings.users): " +
			"its story needs a database without them; name another with DATABASE_URL, or unset it for a throwaway one")
	}
	return nil
}
