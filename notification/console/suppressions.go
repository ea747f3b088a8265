package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/tidings-go/tidings/notification"
)

// suppressionRow is a suppression as a page shows it.
type suppressionRow struct {
	notification.Suppression
	Shown string // the address, as shown
}

// suppressions lists the suppressed addresses, of one channel when the
// query names it, as many as SuppressionsLimitMax. A page names no
// address in its links or its redirects, which servers log: a lift posts
// its address in the form's body, and only where addresses are shown.
func (h *handler) suppressions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	channel := q.Get("channel")
	found, err := h.client.Suppressions(r.Context(), &notification.SuppressionFilter{Channel: channel,
		Limit: notification.SuppressionsLimitMax})
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	rows := make([]suppressionRow, len(found))
	for i, s := range found {
		rows[i] = suppressionRow{Suppression: s, Shown: h.recipient(s.Address)}
	}
	var flash string
	switch q.Get("lifted") {
	case "yes":
		flash = "Lifted the suppression: requests to the address go out again."
	case "no":
		flash = "The address was not suppressed in that scope: nothing lifted."
	}
	h.render(w, r, http.StatusOK, "suppressions.html", page{Title: "Suppressions", Nav: "suppressions", Flash: flash,
		Data: struct {
			Channel  string
			Rows     []suppressionRow
			Full     bool // as many as a page shows: there may be more
			Liftable bool // addresses are shown, so a row can be lifted here
		}{channel, rows, len(rows) == notification.SuppressionsLimitMax, h.opts.ShowRecipients}})
}

// lift lifts the suppression the form names and goes back to the list of
// its channel.
func (h *handler) lift(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	lifted, err := h.client.Lift(r.Context(), nil, f.Get("channel"), f.Get("address"), f.Get("scope"))
	if err != nil {
		if errors.Is(err, notification.ErrInvalidRequest) {
			h.fail(w, r, http.StatusBadRequest, "The form does not name a channel, an address and a scope that can be suppressed.")
			return
		}
		h.failDB(w, r, err)
		return
	}
	done := "no"
	if lifted {
		done = "yes"
	}
	v := url.Values{"channel": {f.Get("channel")}, "lifted": {done}}
	http.Redirect(w, r, h.opts.BasePath+"/suppressions?"+v.Encode(), http.StatusSeeOther)
}
