package service

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is the service's API on a migrated database of its own,
// and the application's pool to look at what the API wrote.
type testBundle struct {
	api http.Handler
	db  *sql.DB
}

// setup migrates a server of the test's own: the service's tables have
// fixed schemas (tidings, bookings), which no other test binary on a
// shared server may see. The API connects as the application role.
func setup(t *testing.T) *testBundle {
	t.Helper()
	migrate := func(ctx context.Context, db *sql.DB, _ string) error { return Migrate(ctx, db) }
	url, cluster := pgtest.Cluster(t, nil, migrate, tidings.SchemaDefault)
	owner, err := sql.Open("postgres", cluster.URL())
	require.NoError(t, err)
	defer owner.Close()
	pgtest.Grant(t, owner, "bookings")

	db, err := sql.Open("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ia, err := inapp.New(&inapp.Config{DB: db})
	require.NoError(t, err)
	notes, err := notification.NewClient(db, nil)
	require.NoError(t, err)
	s := &Service{db: db, inapp: ia, notes: notes, log: slog.New(slog.DiscardHandler)}
	return &testBundle{api: s.routes(), db: db}
}

// call sends the request to the API and returns its status and body.
func (b *testBundle) call(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	b.api.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

// refused sends the request to the API and requires a 400 whose message
// names each of fields.
func (b *testBundle) refused(t *testing.T, method, path, body string, fields ...string) {
	t.Helper()
	code, msg := b.call(t, method, path, body)
	require.Equal(t, http.StatusBadRequest, code, msg)
	for _, f := range fields {
		require.Contains(t, msg, f)
	}
}

// count runs a count(*) query.
func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(t.Context(), query, args...).Scan(&n))
	return n
}

// The API answers bad input with a 400 that names each field at fault,
// a booking that does not exist with a 404, and writes nothing for a
// request it refuses.
func TestAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, body := b.call(t, http.MethodPost, "/users", `{"id":"host-1","name":"Hopper Parking","email":"hosts@hopper.example"}`)
	require.Equal(t, http.StatusCreated, code, body)

	t.Run("CreateUserRefused", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name, id, body string
			fields         []string
		}{
			{"Empty", "", `{}`, []string{"id: is required", "name: is required"}},
			{"NULInName", "nul-name", `{"id":"nul-name","name":"Ada\u0000Lovelace"}`, []string{"name: has a control character"}},
			{"LongID", strings.Repeat("a", 180), `{"id":"` + strings.Repeat("a", 180) + `","name":"Ada"}`, []string{"id: is 180 bytes long, at most 64"}},
			{"IDWithSlash", "ada/x", `{"id":"ada/x","name":"Ada"}`, []string{"id: may hold only"}},
			{"NameTooLong", "long-name", `{"id":"long-name","name":"` + strings.Repeat("é", 101) + `"}`, []string{"name: is 202 bytes long"}},
			{"Email", "bad-email", `{"id":"bad-email","name":"Ada","email":"Ada <ada@example.com>"}`, []string{"email: is not a mail address"}},
			{"Phone", "bad-phone", `{"id":"bad-phone","name":"Ada","phone":"0176 123"}`, []string{"phone: is not a number in E.164 form"}},
			{"PushToken", "bad-token", `{"id":"bad-token","name":"Ada","push_token":"Exponent\nPushToken"}`, []string{"push_token: has a control character"}},
			{"Several", "several", `{"id":"several","email":"@","phone":"+1"}`, []string{"name: is required", "email:", "phone:"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b.refused(t, http.MethodPost, "/users", tt.body, tt.fields...)
				require.Zero(t, b.count(t, `SELECT count(*) FROM bookings.users WHERE id = $1`, tt.id), "a refused user was stored")
			})
		}
	})

	t.Run("SetPhoneRefused", func(t *testing.T) {
		t.Parallel()
		code, body := b.call(t, http.MethodPost, "/users", `{"id":"phone-owner","name":"Ada","phone":"+15005550006"}`)
		require.Equal(t, http.StatusCreated, code, body)
		b.refused(t, http.MethodPut, "/users/phone-owner/phone", `{"phone":"+1500555\u00000006"}`, "phone: is not a number in E.164 form")
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM bookings.users WHERE id = 'phone-owner' AND phone = '+15005550006'`))
	})

	t.Run("CreateBookingRefused", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name, place, body string
			fields            []string
		}{
			{"Empty", "", `{}`, []string{"driver_id: is required", "host_id: is required", "place: is required", "starts_at: is required"}},
			{"UnknownDriver", "Lot U", `{"driver_id":"nobody","host_id":"host-1","place":"Lot U","starts_at":"2026-12-01T09:00:00Z"}`,
				[]string{"driver_id: no such user"}},
			{"UnknownHost", "Lot H", `{"driver_id":"host-1","host_id":"nobody","place":"Lot H","starts_at":"2026-12-01T09:00:00Z"}`,
				[]string{"host_id: no such user"}},
			{"NULInPlace", "Lot\x00N", `{"driver_id":"host-1","host_id":"host-1","place":"Lot\u0000N","starts_at":"2026-12-01T09:00:00Z"}`,
				[]string{"place: has a control character"}},
			{"StartsAtYear", "Lot Y", `{"driver_id":"host-1","host_id":"host-1","place":"Lot Y","starts_at":"0100-12-01T09:00:00Z"}`,
				[]string{"starts_at: is in the year 100"}},
			{"Status", "Lot S", `{"driver_id":"host-1","host_id":"host-1","place":"Lot S","starts_at":"2026-12-01T09:00:00Z","status":"confirmed"}`,
				[]string{"status: are the service's to set"}},
			{"LongDriverID", "Lot L", `{"driver_id":"` + strings.Repeat("d", 65) + `","host_id":"host-1","place":"Lot L","starts_at":"2026-12-01T09:00:00Z"}`,
				[]string{"driver_id: is 65 bytes long"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b.refused(t, http.MethodPost, "/bookings", tt.body, tt.fields...)
				// A NUL cannot be a query argument either: look for the
				// place as it would have been stored, bytes and all.
				require.Zero(t, b.count(t, `SELECT count(*) FROM bookings.bookings WHERE convert_to(place, 'UTF8') = $1`, []byte(tt.place)),
					"a refused booking was stored")
			})
		}
	})

	t.Run("ConfirmBooking", func(t *testing.T) {
		t.Parallel()
		code, body := b.call(t, http.MethodPost, "/users", `{"id":"driver-1","name":"Ada","email":"ada@drivers.example"}`)
		require.Equal(t, http.StatusCreated, code, body)
		code, body = b.call(t, http.MethodPost, "/bookings", `{"driver_id":"driver-1","host_id":"host-1","place":"Lot A","starts_at":"2026-12-01T09:00:00Z"}`)
		require.Equal(t, http.StatusCreated, code, body)
		var booking Booking
		require.NoError(t, json.Unmarshal([]byte(body), &booking))

		code, body = b.call(t, http.MethodPost, fmt.Sprintf("/bookings/%d/confirm", booking.ID), "")
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, 5, b.count(t, `SELECT count(*) FROM tidings.outbox WHERE correlation_id = $1`, fmt.Sprintf("booking-%d", booking.ID)),
			"mail, text and in-app for the driver; mail and in-app for the host")

		code, body = b.call(t, http.MethodPost, "/bookings/999999/confirm", "")
		require.Equal(t, http.StatusNotFound, code, body)
		require.Contains(t, body, "no such booking")
		b.refused(t, http.MethodPost, "/bookings/x/confirm", "", "booking id")
	})

	// A user stored before the API checked ids (180 characters) makes
	// the dedup keys of the booking's notifications too long: staging
	// refuses them, and so does the confirmation, which changes nothing.
	t.Run("ConfirmBookingOfAnOverlongUserID", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("u", 180)
		_, err := b.db.ExecContext(t.Context(), `INSERT INTO bookings.users (id, name, email, phone, push_token) VALUES ($1, 'Ada', 'ada@drivers.example', '', '')`, long)
		require.NoError(t, err)
		var id int64
		require.NoError(t, b.db.QueryRowContext(t.Context(), `INSERT INTO bookings.bookings (driver_id, host_id, place, starts_at)
			VALUES ($1, 'host-1', 'Lot O', '2026-12-01T09:00:00Z') RETURNING id`, long).Scan(&id))

		b.refused(t, http.MethodPost, fmt.Sprintf("/bookings/%d/confirm", id), "", "DedupKey")
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM bookings.bookings WHERE id = $1 AND status = 'requested'`, id))
		require.Zero(t, b.count(t, `SELECT count(*) FROM tidings.outbox WHERE correlation_id = $1`, fmt.Sprintf("booking-%d", id)))
	})

	t.Run("ConfirmBookingOfAnotherStatus", func(t *testing.T) {
		t.Parallel()
		var id int64
		require.NoError(t, b.db.QueryRowContext(t.Context(), `INSERT INTO bookings.bookings (driver_id, host_id, place, starts_at, status)
			VALUES ('host-1', 'host-1', 'Lot C', '2026-12-01T09:00:00Z', 'cancelled') RETURNING id`).Scan(&id))
		code, body := b.call(t, http.MethodPost, fmt.Sprintf("/bookings/%d/confirm", id), "")
		require.Equal(t, http.StatusConflict, code, body)
		require.Contains(t, body, "is cancelled")
	})
}

// Run closes its listener when it fails before it serves (here: no
// database to migrate), so that a client of the listener is refused at
// once instead of waiting for an answer that never comes.
func TestRunClosesTheListenerWhenItCannotStart(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	nowhere, err := net.Listen("tcp", "127.0.0.1:0") // a port that refuses once closed
	require.NoError(t, err)
	require.NoError(t, nowhere.Close())
	db, err := sql.Open("postgres", "postgres://"+nowhere.Addr().String()+"/none?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	require.Error(t, Run(t.Context(), Config{DB: db}, ln))
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err == nil {
		_ = conn.Close()
	}
	require.Error(t, err, "Run failed and left its listener open")
}
