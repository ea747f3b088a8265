package inapp

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/validate"
)

// Bounds of ListOpts.Limit.
const (
	// ListLimitDefault is how many notifications List returns when
	// ListOpts.Limit is 0.
	ListLimitDefault = 50
	// ListLimitMax is the largest ListOpts.Limit accepted.
	ListLimitMax = 500
)

// Notification is one row of a user's in-app inbox.
type Notification struct {
	// ID is the request's id (delivery.Pending.ID): pass it to MarkRead.
	ID uuid.UUID
	// Template is the template or category the request named; may be
	// empty. The application renders it.
	Template string
	// Data holds the template's values, as JSON decodes them (numbers are
	// float64). It is never nil: empty when the request had none.
	Data map[string]any
	// CorrelationID is the correlation id of the write that staged the
	// request; may be empty.
	CorrelationID string
	// CreatedAt is when the notification was written, by the database
	// clock.
	CreatedAt time.Time
	// ReadAt is when the user first read it, by the database clock; zero
	// while unread.
	ReadAt time.Time
}

// Read reports whether the notification was marked read.
func (n Notification) Read() bool { return !n.ReadAt.IsZero() }

// Cursor returns the position just after n in List's order: pass it as
// ListOpts.Before to get the next page.
func (n Notification) Cursor() Cursor { return Cursor{CreatedAt: n.CreatedAt, ID: n.ID} }

// Cursor is a position in a user's notifications, newest first. List
// returns the notifications after it: created before CreatedAt, or at
// CreatedAt with an ID below ID. So Cursor{CreatedAt: t} means "created
// before t", and the zero Cursor means "from the newest".
//
// Get one from [Notification.Cursor]. It encodes as text (MarshalText),
// so it can travel in a URL or JSON to the next page's request. A Cursor is
// a value, safe to copy.
type Cursor struct {
	// CreatedAt is the creation time of the position; zero means the
	// zero Cursor, whatever ID holds.
	CreatedAt time.Time
	// ID breaks ties between notifications created at CreatedAt: those
	// with a lower ID come after the position. The zero ID leaves out
	// every notification created at CreatedAt itself.
	ID uuid.UUID
}

// IsZero reports whether c is the zero Cursor's position: from the newest.
func (c Cursor) IsZero() bool { return c.CreatedAt.IsZero() }

// MarshalText encodes c as "<microseconds since 1970>_<id>", or as empty
// text for a zero Cursor. The database keeps microseconds, so a Cursor from
// a Notification survives the round trip exactly.
func (c Cursor) MarshalText() ([]byte, error) {
	if c.IsZero() {
		return []byte{}, nil
	}
	return []byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "_" + c.ID.String()), nil
}

// UnmarshalText decodes what MarshalText encoded; empty text is the zero
// Cursor. Anything else, or a time before 1970 or after the year 9999, is
// an ErrInvalid error.
func (c *Cursor) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*c = Cursor{}
		return nil
	}
	micros, id, ok := strings.Cut(string(text), "_")
	us, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("%w: cursor is not <microseconds>_<id>", ErrInvalid)
	}
	uid, err := uuid.Parse(id)
	if err != nil {
		return fmt.Errorf("%w: cursor is not <microseconds>_<id>", ErrInvalid)
	}
	at := time.UnixMicro(us)
	if err := validate.Year("cursor's time", at); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	*c = Cursor{CreatedAt: at, ID: uid}
	return nil
}

// String returns c's text encoding.
func (c Cursor) String() string {
	b, _ := c.MarshalText()
	return string(b)
}

// ListOpts narrows List. A nil *ListOpts means all defaults.
type ListOpts struct {
	// UnreadOnly lists only notifications that are not marked read.
	UnreadOnly bool
	// Limit is the most notifications returned: 0 means ListLimitDefault
	// (50); more than ListLimitMax (500), or negative, is an error.
	Limit int
	// Before starts the page after this position; the zero Cursor starts
	// at the newest. Pass the last notification's Cursor to get the next
	// page. A time before 1970 or after the year 9999 is an error.
	Before Cursor
}

// List returns recipient's notifications, newest first (by CreatedAt, then
// ID), at most opts.Limit of them. It never returns another recipient's.
// A page shorter than the limit is the last one.
//
// Paging with Before neither skips nor repeats a row when notifications
// arrive meanwhile: they sort ahead of the cursor, and appear when the
// user reloads from the newest. CreatedAt is the start of the writing
// transaction, so one that commits a moment after another may sort just
// behind it.
func (d *Delivery) List(ctx context.Context, recipient string, opts *ListOpts) ([]Notification, error) {
	var o ListOpts
	if opts != nil {
		o = *opts
	}
	if err := checkRecipient(recipient); err != nil {
		return nil, err
	}
	switch {
	case o.Limit == 0:
		o.Limit = ListLimitDefault
	case o.Limit < 0 || o.Limit > ListLimitMax:
		return nil, fmt.Errorf("%w: limit %d is outside 1..%d", ErrInvalid, o.Limit, ListLimitMax)
	}
	if err := validate.Year("ListOpts.Before", o.Before.CreatedAt); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var before any = "infinity"
	after := uuid.Max
	if !o.Before.IsZero() {
		before, after = o.Before.CreatedAt, o.Before.ID
	}
	query := d.q.list
	if o.UnreadOnly {
		query = d.q.listUnread
	}
	rows, err := d.db.QueryContext(ctx, query, recipient, before, after, o.Limit)
	if err != nil {
		return nil, fmt.Errorf("inapp: list: %w", err)
	}
	defer func() { _ = rows.Close() }()
	list := make([]Notification, 0, min(o.Limit, ListLimitDefault))
	for rows.Next() {
		var (
			n      Notification
			data   []byte
			readAt sql.NullTime
		)
		if err := rows.Scan(&n.ID, &n.Template, &data, &n.CorrelationID, &n.CreatedAt, &readAt); err != nil {
			return nil, fmt.Errorf("inapp: list: %w", err)
		}
		if err := json.Unmarshal(data, &n.Data); err != nil {
			return nil, fmt.Errorf("inapp: list: decode the data of %s: %w", n.ID, err)
		}
		if n.Data == nil {
			n.Data = map[string]any{}
		}
		n.ReadAt = readAt.Time
		list = append(list, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inapp: list: %w", err)
	}
	return list, nil
}

// UnreadCount returns how many of recipient's notifications are not
// marked read.
func (d *Delivery) UnreadCount(ctx context.Context, recipient string) (int, error) {
	if err := checkRecipient(recipient); err != nil {
		return 0, err
	}
	var n int
	if err := d.db.QueryRowContext(ctx, d.q.unreadCount, recipient).Scan(&n); err != nil {
		return 0, fmt.Errorf("inapp: unread count: %w", err)
	}
	return n, nil
}

// MarkRead marks recipient's notifications ids read and returns how many
// it marked. Ids of another recipient's notifications, unknown ids and
// notifications already read are left alone and not counted: a read
// notification keeps its first ReadAt. No ids is a no-op.
func (d *Delivery) MarkRead(ctx context.Context, recipient string, ids ...uuid.UUID) (int64, error) {
	if err := checkRecipient(recipient); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = id.String()
	}
	return d.mark(ctx, "mark read", d.q.markRead, recipient, pgarray.Of(texts))
}

// MarkAllRead marks every unread notification of recipient read and
// returns how many it marked.
func (d *Delivery) MarkAllRead(ctx context.Context, recipient string) (int64, error) {
	if err := checkRecipient(recipient); err != nil {
		return 0, err
	}
	return d.mark(ctx, "mark all read", d.q.markAllRead, recipient)
}

func (d *Delivery) mark(ctx context.Context, op, query string, args ...any) (int64, error) {
	res, err := d.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("inapp: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("inapp: %s: %w", op, err)
	}
	return n, nil
}

// checkRecipient refuses an empty recipient: the calls are scoped by it,
// and an empty one is more likely a missing user id than a user.
func checkRecipient(recipient string) error {
	if recipient == "" {
		return fmt.Errorf("%w: recipient is empty", ErrInvalid)
	}
	return nil
}
