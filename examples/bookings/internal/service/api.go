package service

import (
	"cmp"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// routes are the service's API. The example has no authentication, to stay
// short: a real service puts its own in front of every route, and the
// operators' /admin routes, which show addresses and re-emit, behind its
// operators' log-in, on a listener the providers' report receivers
// (/feedback, which must be reachable from the internet) do not share.
func (s *Service) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /users", s.createUser)
	mux.HandleFunc("PUT /users/{id}/phone", s.setPhone)
	mux.HandleFunc("PUT /users/{id}/preferences", s.setPreference)
	mux.HandleFunc("PUT /users/{id}/quiet-hours", s.setQuietHours)
	mux.HandleFunc("POST /users/{id}/password-changed", s.passwordChanged)
	mux.HandleFunc("POST /users/{id}/verify-phone", s.verifyPhone)
	mux.HandleFunc("GET /users/{id}/notifications", s.listNotifications)
	mux.HandleFunc("POST /bookings", s.createBooking)
	mux.HandleFunc("POST /bookings/{id}/confirm", s.confirmBooking)
	mux.HandleFunc("GET /notifications/{id}", s.notificationStatus)
	mux.HandleFunc("GET /admin/dead", s.listDead)
	mux.HandleFunc("POST /admin/dead/{id}/reemit", s.reemit)
	mux.HandleFunc("GET /admin/suppressions", s.listSuppressions)
	return mux
}

// User is a driver or a host.
type User struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Email     string `json:"email"`
	Phone     string `json:"phone"`
	PushToken string `json:"push_token"`
}

// check refuses a user the service cannot store or address: an error that
// names each field at fault. Email, phone and push token are optional (a
// user without one gets nothing on its channel).
func (u User) check() error {
	return errors.Join(checkID("id", u.ID), checkText("name", u.Name, true, textMaxLen),
		checkEmail("email", u.Email), checkPhone("phone", u.Phone), checkText("push_token", u.PushToken, false, textMaxLen))
}

func (s *Service) createUser(w http.ResponseWriter, r *http.Request) {
	var u User
	if !decode(w, r, &u) || !valid(w, u.check()) {
		return
	}
	// Creating a user that exists updates it, so the demo can run again
	// against the same database.
	_, err := s.db.ExecContext(r.Context(), `INSERT INTO bookings.users (id, name, email, phone, push_token)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET name = $2, email = $3, phone = $4, push_token = $5`,
		u.ID, u.Name, u.Email, u.Phone, u.PushToken)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply(w, http.StatusCreated, map[string]string{"id": u.ID})
}

func (s *Service) setPhone(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Phone string `json:"phone"`
	}
	if !decode(w, r, &body) || !valid(w, checkPhone("phone", body.Phone)) {
		return
	}
	res, err := s.db.ExecContext(r.Context(), `UPDATE bookings.users SET phone = $2 WHERE id = $1`, r.PathValue("id"), body.Phone)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if n, _ := res.RowsAffected(); n == 0 {
		http.Error(w, "no such user", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Booking is a request for a parking place.
type Booking struct {
	ID       int64     `json:"id"`
	DriverID string    `json:"driver_id"`
	HostID   string    `json:"host_id"`
	Place    string    `json:"place"`
	StartsAt time.Time `json:"starts_at"`
	Status   string    `json:"status"`
}

// check refuses a booking the service cannot store: an error that names
// each field at fault. The id and the status are the service's to set.
func (b Booking) check() error {
	var startsAt error
	switch y := b.StartsAt.Year(); {
	case b.StartsAt.IsZero():
		startsAt = errors.New("starts_at: is required")
	case y < 1970 || y > 9999:
		startsAt = fmt.Errorf("starts_at: is in the year %d, not from 1970 to 9999", y)
	}
	var set error
	if b.ID != 0 || b.Status != "" {
		set = errors.New("id, status: are the service's to set")
	}
	return errors.Join(set, checkID("driver_id", b.DriverID), checkID("host_id", b.HostID),
		checkText("place", b.Place, true, textMaxLen), startsAt)
}

// userReferences names the field of each reference of bookings.bookings
// to a user, by its constraint's name (PostgreSQL's default, schema.sql).
var userReferences = map[string]string{"bookings_driver_id_fkey": "driver_id", "bookings_host_id_fkey": "host_id"}

func (s *Service) createBooking(w http.ResponseWriter, r *http.Request) {
	var b Booking
	if !decode(w, r, &b) || !valid(w, b.check()) {
		return
	}
	err := s.db.QueryRowContext(r.Context(), `INSERT INTO bookings.bookings (driver_id, host_id, place, starts_at)
		VALUES ($1, $2, $3, $4) RETURNING id, status`, b.DriverID, b.HostID, b.Place, b.StartsAt).Scan(&b.ID, &b.Status)
	if pqErr, ok := errors.AsType[*pq.Error](err); ok && pqErr.Code == foreignKeyViolation {
		http.Error(w, cmp.Or(userReferences[pqErr.Constraint], "driver_id or host_id")+": no such user", http.StatusBadRequest)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply(w, http.StatusCreated, b)
}

// confirmBooking is the write that causes the notifications: the booking's
// new status and its notifications commit together, or not at all, and the
// response does not wait for any provider.
func (s *Service) confirmBooking(w http.ResponseWriter, r *http.Request) {
	ctx := relay.WithCorrelationID(r.Context(), "booking-"+r.PathValue("id"))
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "booking id must be a number", http.StatusBadRequest)
		return
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer func() { _ = tx.Rollback() }()

	var b Booking
	var driver, host User
	// Confirming again (a double click, a client's retry) stages the
	// notifications again: their dedup keys let only the first go out.
	err = tx.QueryRowContext(ctx, `UPDATE bookings.bookings b SET status = 'confirmed'
		FROM bookings.users d, bookings.users h
		WHERE b.id = $1 AND b.status IN ('requested', 'confirmed') AND d.id = b.driver_id AND h.id = b.host_id
		RETURNING b.id, b.place, b.starts_at, d.id, d.name, d.email, d.push_token, h.id, h.name, h.email, h.push_token`, id).
		Scan(&b.ID, &b.Place, &b.StartsAt, &driver.ID, &driver.Name, &driver.Email, &driver.PushToken,
			&host.ID, &host.Name, &host.Email, &host.PushToken)
	if errors.Is(err, sql.ErrNoRows) {
		s.unconfirmable(w, r, tx, id)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ids, err := s.notes.StageBatch(ctx, tx, Module, confirmations(b, driver, host))
	if errors.Is(err, notification.ErrInvalidRequest) {
		// A user stored before the API checked ids can make a dedup
		// key too long: nothing is confirmed, and the answer says why.
		http.Error(w, fmt.Sprintf("booking %d: %v", id, err), http.StatusBadRequest)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := tx.Commit(); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(ctx, "booking confirmed", "booking_id", b.ID, "notifications", len(ids))
	reply(w, http.StatusOK, map[string]any{"id": b.ID, "status": "confirmed", "notifications": ids})
}

// unconfirmable answers a confirmation that updated no booking: 404 when
// there is no booking id, 409 when its status does not allow it.
func (s *Service) unconfirmable(w http.ResponseWriter, r *http.Request, tx *sql.Tx, id int64) {
	var status string
	err := tx.QueryRowContext(r.Context(), `SELECT status FROM bookings.bookings WHERE id = $1`, id).Scan(&status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		http.Error(w, "no such booking", http.StatusNotFound)
	case err != nil:
		s.fail(w, r, err)
	default:
		http.Error(w, fmt.Sprintf("booking %d is %s, neither requested nor confirmed", id, status), http.StatusConflict)
	}
}

// confirmations fans one confirmed booking out into one request per
// recipient and channel, each about its user (their preferences and quiet
// hours apply) and keyed so that the booking's confirmation goes out once
// per recipient and channel however often it is confirmed. A user without
// an address of a channel (no app, so no push token) gets nothing on it.
func confirmations(b Booking, driver, host User) []notification.Request {
	var reqs []notification.Request
	add := func(u User, channel, recipient, template string) {
		if recipient == "" {
			return
		}
		reqs = append(reqs, notification.Request{Channel: channel, Recipient: recipient, Template: template,
			Subject: u.ID, Category: "booking", DedupKey: fmt.Sprintf("booking-%d/confirmed/%s/%s", b.ID, u.ID, channel),
			Data: map[string]any{"booking_id": b.ID, "place": b.Place, "starts_at": b.StartsAt.Format(time.RFC1123), "name": u.Name}})
	}
	add(driver, "mail", driver.Email, "booking_confirmed")
	add(driver, "push", driver.PushToken, "booking_confirmed")
	add(driver, "sms", driver.ID, "booking_confirmed")
	add(driver, "inapp", driver.ID, "booking_confirmed")
	add(host, "mail", host.Email, "booking_confirmed_host")
	add(host, "push", host.PushToken, "booking_confirmed_host")
	add(host, "inapp", host.ID, "booking_confirmed_host")
	return reqs
}

// setPreference turns a category, a channel or both on or off for a user,
// in one transaction with whatever else a settings form saves.
func (s *Service) setPreference(w http.ResponseWriter, r *http.Request) {
	var p notification.Preference
	if !decode(w, r, &p) {
		return
	}
	s.inTx(w, r, func(tx *sql.Tx) error { return s.notes.SetPreference(r.Context(), tx, r.PathValue("id"), p) })
}

// setQuietHours sets a user's time zone and quiet windows.
func (s *Service) setQuietHours(w http.ResponseWriter, r *http.Request) {
	var q notification.QuietHours
	if !decode(w, r, &q) {
		return
	}
	s.inTx(w, r, func(tx *sql.Tx) error { return s.notes.SetQuietHours(r.Context(), tx, r.PathValue("id"), q) })
}

// passwordChanged tells the user their password changed: a security
// notice, which goes whatever their preferences and quiet hours say.
func (s *Service) passwordChanged(w http.ResponseWriter, r *http.Request) {
	s.stageFor(w, r, func(u User) notification.Request {
		return notification.Request{Channel: "mail", Recipient: u.Email, Template: "password_changed",
			Subject: u.ID, Category: "security", Data: map[string]any{"name": u.Name}}
	})
}

// verifyPhone texts the user's number a one-time code. The code is a
// secret of the request: the SMS carries it, and the database forgets it
// once the request ends; a code that could not go out within ten minutes
// expires. It is addressed to the number it verifies, so a number that
// texted STOP is not texted.
func (s *Service) verifyPhone(w http.ResponseWriter, r *http.Request) {
	s.stageFor(w, r, func(u User) notification.Request {
		return notification.Request{Channel: "sms", Recipient: u.Phone, Template: "verify_phone",
			Subject: u.ID, Category: "security", ExpiresAt: time.Now().Add(10 * time.Minute),
			Secrets: map[string]string{"code": oneTimeCode()}}
	})
}

// stageFor stages, in one transaction, the request build makes for the
// user of the path, and answers with its id.
func (s *Service) stageFor(w http.ResponseWriter, r *http.Request, build func(User) notification.Request) {
	var id uuid.UUID
	s.inTx(w, r, func(tx *sql.Tx) error {
		var u User
		err := tx.QueryRowContext(r.Context(), `SELECT id, name, email, phone FROM bookings.users WHERE id = $1`,
			r.PathValue("id")).Scan(&u.ID, &u.Name, &u.Email, &u.Phone)
		if err != nil {
			return err
		}
		id, err = s.notes.Stage(r.Context(), tx, Module, build(u))
		return err
	}, func() { reply(w, http.StatusAccepted, map[string]any{"notification": id}) })
}

// inTx runs fn in a transaction and commits it, then answers with done,
// or 204; an invalid argument is a 400 that says which, a missing user a
// 404.
func (s *Service) inTx(w http.ResponseWriter, r *http.Request, fn func(*sql.Tx) error, done ...func()) {
	tx, err := s.db.BeginTx(r.Context(), nil)
	if err == nil {
		defer func() { _ = tx.Rollback() }()
		if err = fn(tx); err == nil {
			err = tx.Commit()
		}
	}
	switch {
	case errors.Is(err, notification.ErrInvalidRequest):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, sql.ErrNoRows):
		http.Error(w, "no such user", http.StatusNotFound)
	case err != nil:
		s.fail(w, r, err)
	case len(done) > 0:
		done[0]()
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// oneTimeCode is six digits from the system's secure random source.
func oneTimeCode() string {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		panic(err) // crypto/rand does not fail on a supported system
	}
	return fmt.Sprintf("%06d", n)
}

func (s *Service) listNotifications(w http.ResponseWriter, r *http.Request) {
	list, err := s.inapp.List(r.Context(), r.PathValue("id"), nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply(w, http.StatusOK, list)
}

func (s *Service) notificationStatus(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r)
	if !ok {
		return
	}
	st, err := s.notes.Status(r.Context(), id)
	if errors.Is(err, relay.ErrNotFound) {
		http.Error(w, "no such notification", http.StatusNotFound)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply(w, http.StatusOK, st)
}

func (s *Service) listDead(w http.ResponseWriter, r *http.Request) {
	dead, err := s.notes.ListDead(r.Context(), &notification.DeadFilter{Module: Module})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	type deadJSON struct {
		ID       uuid.UUID `json:"id"`
		Kind     string    `json:"kind"`
		FailedAt time.Time `json:"failed_at"`
		Attempts int       `json:"attempts"`
		Reason   string    `json:"reason"`
	}
	out := make([]deadJSON, len(dead)) // no payload: it holds recipients
	for i, d := range dead {
		out[i] = deadJSON{d.ID, d.Kind, d.FailedAt, d.Attempts, d.Reason}
	}
	reply(w, http.StatusOK, out)
}

func (s *Service) reemit(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r)
	if !ok {
		return
	}
	n, err := s.notes.Reemit(r.Context(), &notification.DeadFilter{Module: Module, IDs: []uuid.UUID{id}})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if n == 0 {
		http.Error(w, "no dead notification with that id", http.StatusNotFound)
		return
	}
	reply(w, http.StatusAccepted, map[string]any{"reemitted": n})
}

// listSuppressions lists the addresses no notification goes to any more
// (a hard bounce, a complaint, a STOP, an uninstalled app), the first
// page of them, of the channel the query names or of all.
func (s *Service) listSuppressions(w http.ResponseWriter, r *http.Request) {
	list, err := s.notes.Suppressions(r.Context(), &notification.SuppressionFilter{Channel: r.URL.Query().Get("channel")})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	type suppressionJSON struct {
		Channel   string    `json:"channel"`
		Address   string    `json:"address"`
		Scope     string    `json:"scope,omitempty"`
		Class     string    `json:"class"`
		Reason    string    `json:"reason"`
		Provider  string    `json:"provider,omitempty"`
		Source    string    `json:"source,omitempty"`
		CreatedAt time.Time `json:"created_at"`
	}
	out := make([]suppressionJSON, len(list))
	for i, sp := range list {
		out[i] = suppressionJSON{sp.Channel, sp.Address, sp.Scope, string(sp.Class), sp.Reason, sp.Provider, sp.Source, sp.CreatedAt}
	}
	reply(w, http.StatusOK, out)
}

func parseID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "id must be a UUID", http.StatusBadRequest)
		return uuid.Nil, false
	}
	return id, true
}

// valid answers 400 with err's text, which names each field at fault,
// and reports whether err is nil.
func valid(w http.ResponseWriter, err error) bool {
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, fmt.Sprintf("bad request body: %v", err), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers 500 and logs the error (never the request body: it holds
// personal data).
func (s *Service) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	http.Error(w, "internal error", http.StatusInternalServerError)
}
