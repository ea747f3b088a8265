// Command demo runs the booking service end to end on this machine: a
// throwaway PostgreSQL (unless DATABASE_URL names one), a local SMTP server
// and local Expo and Twilio stand-ins, the service itself, and a client that
// confirms a handful of bookings through its HTTP API. It prints what each
// channel received, the one notification that died (an invalid phone
// number) with its reason, and its re-emit once the number is corrected.
// It stops everything it started before it exits.
//
//	go run ./examples/bookings/demo
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	_ "github.com/lib/pq"

	"github.com/tidings-go/tidings/examples/bookings/internal/service"
	"github.com/tidings-go/tidings/internal/pgtemp"
)

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
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Fprintln(out, "starting a throwaway PostgreSQL...")
		cluster, err := pgtemp.Start(ctx, &pgtemp.Options{Durable: true})
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, cluster.Stop()) }()
		dsn = cluster.URL()
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()

	prov, err := startProviders()
	if err != nil {
		return err
	}
	defer prov.close()
	channels, err := service.Providers{
		SMTPAddr: prov.smtpAddr, MailFrom: "Parking <no-reply@parking.example>",
		PushURL: prov.expo.URL,
		SMSURL:  prov.twilio.URL, SMSAccountSID: "AC00000000000000000000000000000000", SMSAuthToken: "demo-token", SMSFrom: "+15005550006",
	}.Channels()
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	svcCtx, stopService := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- service.Run(svcCtx, service.Config{DB: db, DSN: dsn, Channels: channels, Logger: logger}, ln)
	}()
	defer func() {
		stopService()
		err = errors.Join(err, <-served)
	}()

	c := &client{base: "http://" + ln.Addr().String()}
	return story(ctx, out, c, prov)
}

// story is what a user of the API does, and what the demo shows of it.
func story(ctx context.Context, out io.Writer, c *client, prov *providers) error {
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
	fmt.Fprintln(out, "\n== confirming bookings through the HTTP API")
	var staged []uuid.UUID
	for i, driver := range []string{"ada", "grace", "alan"} {
		var b service.Booking
		err := c.do(ctx, http.MethodPost, "/bookings", service.Booking{DriverID: driver, HostID: "hopper",
			Place: fmt.Sprintf("Lot %c, space %d", 'A'+i, 10+i), StartsAt: time.Date(2026, 12, 1+i, 9, 0, 0, 0, time.UTC)}, &b)
		if err != nil {
			return err
		}
		start := time.Now()
		var confirmed struct {
			Notifications []uuid.UUID `json:"notifications"`
		}
		if err := c.do(ctx, http.MethodPost, fmt.Sprintf("/bookings/%d/confirm", b.ID), nil, &confirmed); err != nil {
			return err
		}
		fmt.Fprintf(out, "booking %d for %s confirmed in %s: %d notifications staged in the same transaction\n",
			b.ID, driver, time.Since(start).Round(time.Millisecond), len(confirmed.Notifications))
		staged = append(staged, confirmed.Notifications...)
	}

	for _, id := range staged {
		if _, err := c.waitSettled(ctx, id); err != nil {
			return err
		}
	}
	mails, pushes, texts := prov.received()
	fmt.Fprintln(out, "\n== what each channel received")
	fmt.Fprintf(out, "mail  %d:\n", len(mails))
	for _, m := range mails {
		fmt.Fprintln(out, "      ", m)
	}
	fmt.Fprintf(out, "push  %d (tickets %v)\n", len(pushes), pushes)
	fmt.Fprintf(out, "sms   %d (to %v)\n", len(texts), texts)
	for _, u := range []string{"ada", "grace", "alan", "hopper"} {
		var inbox []struct {
			Template string `json:"Template"`
		}
		if err := c.do(ctx, http.MethodGet, "/users/"+u+"/notifications", nil, &inbox); err != nil {
			return err
		}
		fmt.Fprintf(out, "inapp %s: %d\n", u, len(inbox))
	}

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
	st, err := c.waitSettled(ctx, dead[0].ID)
	if err != nil {
		return err
	}
	_, _, texts = prov.received()
	fmt.Fprintf(out, "%s: %s (provider reference %s); sms received %d (to %v)\n", dead[0].ID, st.State, st.Result, len(texts), texts)
	return nil
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

type status struct {
	State  string
	Result string
	Reason string
}

// waitSettled polls the notification's status until it is settled.
func (c *client) waitSettled(ctx context.Context, id uuid.UUID) (status, error) {
	for {
		var st status
		if err := c.do(ctx, http.MethodGet, "/notifications/"+id.String(), nil, &st); err != nil {
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
