package inapp

import "github.com/tidings-go/tidings/internal/ident"

// queries are the statements of one schema, built once by New. The schema
// name was checked by ident.Check and is quoted, never pasted.
type queries struct {
	insert      string
	list        string
	listUnread  string
	unreadCount string
	markRead    string
	markAllRead string
}

func newQueries(schema string) queries {
	table := ident.Quote(schema) + ".inapp_notifications"
	// list pages newest first by (created_at, id): the cursor is the last
	// row's pair, so rows that share a created_at are neither skipped nor
	// repeated.
	list := func(unread string) string {
		return `SELECT id, template, data, correlation_id, created_at, read_at
			FROM ` + table + `
			WHERE recipient = $1` + unread + `
				AND (created_at, id) < ($2::timestamptz, $3::uuid)
			ORDER BY created_at DESC, id DESC
			LIMIT $4`
	}
	return queries{
		insert: `INSERT INTO ` + table + ` (id, recipient, template, data, correlation_id)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO NOTHING`,
		list:        list(""),
		listUnread:  list(" AND read_at IS NULL"),
		unreadCount: `SELECT count(*) FROM ` + table + ` WHERE recipient = $1 AND read_at IS NULL`,
		markRead: `UPDATE ` + table + ` SET read_at = now()
			WHERE recipient = $1 AND id = ANY ($2::uuid[]) AND read_at IS NULL`,
		markAllRead: `UPDATE ` + table + ` SET read_at = now()
			WHERE recipient = $1 AND read_at IS NULL`,
	}
}
