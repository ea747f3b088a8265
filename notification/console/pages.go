package console

import (
	"cmp"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// pageSize is how many dead requests a page lists, and how many a search
// finds at most.
const pageSize = 50

// overview shows the pending and dead requests per module and channel.
func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	st, err := h.client.Stats(r.Context(), "")
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	total := relay.LaneStats{}
	for _, l := range st.Lanes {
		total.Due += l.Due
		total.Scheduled += l.Scheduled
		total.Dead += l.Dead
		total.OldestDue = max(total.OldestDue, l.OldestDue)
	}
	h.render(w, r, http.StatusOK, "overview.html", page{Title: "Overview", Nav: "overview", Data: struct {
		Stats relay.Stats
		Total relay.LaneStats
	}{st, total}})
}

// deadGroup is the dead requests of one reason code, and how many of
// them each module and channel has.
type deadGroup struct {
	Code  string
	Count int64
	Lanes []relay.DeadCount
}

// deadGroups shows the dead requests grouped by the code of their reason,
// the largest group first.
func (h *handler) deadGroups(w http.ResponseWriter, r *http.Request) {
	st, err := h.client.Stats(r.Context(), "")
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	var groups []deadGroup
	for _, d := range st.Dead {
		i := slices.IndexFunc(groups, func(g deadGroup) bool { return g.Code == d.Code })
		if i < 0 {
			i = len(groups)
			groups = append(groups, deadGroup{Code: d.Code})
		}
		groups[i].Count += d.Count
		groups[i].Lanes = append(groups[i].Lanes, d)
	}
	slices.SortStableFunc(groups, func(a, b deadGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Code, b.Code))
	})
	h.render(w, r, http.StatusOK, "dead.html", page{Title: "Dead requests", Nav: "dead", Data: struct {
		At     time.Time
		Groups []deadGroup
	}{st.At, groups}})
}

// group is the selection of a list of dead requests: a code, a module and
// a channel, each "" for any.
type group struct {
	Code, Module, Channel string
}

func groupOf(v url.Values) group {
	return group{Code: v.Get("code"), Module: v.Get("module"), Channel: v.Get("channel")}
}

// query is the group as the query of a list's address.
func (g group) query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"code": g.Code, "module": g.Module, "channel": g.Channel} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// count is how many dead requests of the group st counts.
func (g group) count(st relay.Stats) int64 {
	var n int64
	for _, d := range st.Dead {
		if (g.Code == "" || d.Code == g.Code) && (g.Module == "" || d.Module == g.Module) &&
			(g.Channel == "" || d.Lane == g.Channel) {
			n += d.Count
		}
	}
	return n
}

// deadRow is a dead request as a list shows it: its recipient masked
// unless the options say otherwise.
type deadRow struct {
	notification.Dead
	Shown string // the recipient, as shown
}

// after is how a list's address names the last request of the previous
// page: its time of death and its id.
func after(d notification.Dead) string {
	return d.FailedAt.UTC().Format(time.RFC3339Nano) + "_" + d.ID.String()
}

func parseAfter(s string) (*notification.Dead, error) {
	at, id, ok := strings.Cut(s, "_")
	if !ok {
		return nil, errors.New("no _")
	}
	var d notification.Dead
	var err error
	if d.FailedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
		return nil, err
	}
	d.FailedAt = d.FailedAt.UTC() // PostgreSQL takes offsets up to ±15:59 only
	if d.ID, err = uuid.Parse(id); err != nil {
		return nil, err
	}
	return &d, nil
}

// deadList lists the dead requests of a group, a page at a time, with the
// forms that re-emit a selection or the whole group.
func (h *handler) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	g := groupOf(q)
	f := &notification.DeadFilter{Code: g.Code, Module: g.Module, Channel: g.Channel, Limit: pageSize + 1}
	if s := q.Get("after"); s != "" {
		var err error
		if f.After, err = parseAfter(s); err != nil {
			h.fail(w, r, http.StatusBadRequest, `The parameter "after" is not a position in the list.`)
			return
		}
	}
	st, err := h.client.Stats(r.Context(), g.Module)
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	dead, err := h.client.ListDead(r.Context(), f)
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	var next template.URL // built here from values it escapes
	if len(dead) > pageSize {
		dead = dead[:pageSize]
		v := g.query()
		v.Set("after", after(dead[pageSize-1]))
		next = template.URL(h.opts.BasePath + "/dead/list?" + v.Encode())
	}
	rows := make([]deadRow, len(dead))
	for i, d := range dead {
		rows[i] = deadRow{Dead: d, Shown: h.recipient(d.Recipient)}
	}
	h.render(w, r, http.StatusOK, "list.html", page{Title: "Dead requests", Nav: "dead", Flash: flash(q), Data: struct {
		Group group
		Count int64
		Until string // the time of the count, which bounds a re-emit of the group
		Rows  []deadRow
		Next  template.URL // the address of the next page, or ""
		First bool
	}{g, g.count(st), st.At.UTC().Format(time.RFC3339Nano), rows, next, f.After == nil}})
}

// recipient is a recipient as the options say to show it.
func (h *handler) recipient(s string) string {
	if h.opts.ShowRecipients {
		return s
	}
	return mask(s)
}

// reemitDead re-emits the requests selected in a list, or its whole group
// as counted when the list was shown (died before "until"), and goes back
// to the list.
func (h *handler) reemitDead(w http.ResponseWriter, r *http.Request) {
	g := groupOf(r.PostForm)
	f := &notification.DeadFilter{Code: g.Code, Module: g.Module, Channel: g.Channel}
	switch r.PostForm.Get("scope") {
	case "selected":
		f.IDs = []uuid.UUID{}
		for _, s := range r.PostForm["id"] {
			id, err := uuid.Parse(s)
			if err != nil {
				h.fail(w, r, http.StatusBadRequest, `A field "id" is not a request id.`)
				return
			}
			f.IDs = append(f.IDs, id)
		}
	case "group":
		until, err := time.Parse(time.RFC3339Nano, r.PostForm.Get("until"))
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, `The field "until" is not a time.`)
			return
		}
		f.Until = until.UTC() // PostgreSQL takes offsets up to ±15:59 only
	default:
		h.fail(w, r, http.StatusBadRequest, `The field "scope" is neither "selected" nor "group".`)
		return
	}
	var n int64
	if f.IDs == nil || len(f.IDs) > 0 { // an empty selection re-emits nothing
		var err error
		if n, err = h.client.Reemit(r.Context(), f); err != nil {
			h.failDB(w, r, err)
			return
		}
	}
	v := g.query()
	v.Set("reemitted", strconv.FormatInt(n, 10))
	http.Redirect(w, r, h.opts.BasePath+"/dead/list?"+v.Encode(), http.StatusSeeOther)
}

// flash says what the change that redirected to the page did.
func flash(q url.Values) string {
	if s := q.Get("reemitted"); s != "" {
		switch n, err := strconv.ParseInt(s, 10, 64); {
		case err != nil:
		case n == 0:
			return "Nothing was re-emitted: nothing was selected, or it was no longer dead."
		case n == 1:
			return "Re-emitted 1 request."
		default:
			return fmt.Sprintf("Re-emitted %d requests.", n)
		}
	}
	switch q.Get("cancelled") {
	case "yes":
		return "Cancelled."
	case "no":
		return "Not cancelled: the request was no longer pending."
	}
	return ""
}

// requestID returns the id of the request the path names, or answers 400.
func (h *handler) requestID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "The address does not name a request id.")
		return uuid.Nil, false
	}
	return id, true
}

// request shows one request and its timeline.
func (h *handler) request(w http.ResponseWriter, r *http.Request) {
	id, ok := h.requestID(w, r)
	if !ok {
		return
	}
	st, err := h.client.Status(r.Context(), id)
	if errors.Is(err, relay.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "No request has this id, or it was purged after its retention.")
		return
	}
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	var causation string
	if c, err := uuid.Parse(st.CausationID); err == nil {
		causation = c.String()
	}
	h.render(w, r, http.StatusOK, "request.html", page{Title: "Request " + id.String(), Flash: flash(r.URL.Query()),
		Data: struct {
			notification.Status
			Causation string // the request whose delivery staged it, or ""
		}{st, causation}})
}

// reemitOne re-emits the request the path names, if it is dead, and goes
// back to its page.
func (h *handler) reemitOne(w http.ResponseWriter, r *http.Request) {
	id, ok := h.requestID(w, r)
	if !ok {
		return
	}
	n, err := h.client.Reemit(r.Context(), &notification.DeadFilter{IDs: []uuid.UUID{id}})
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	http.Redirect(w, r, h.opts.BasePath+"/requests/"+id.String()+"?reemitted="+strconv.FormatInt(n, 10),
		http.StatusSeeOther)
}

// cancel cancels the request the path names, if it is pending, and goes
// back to its page.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := h.requestID(w, r)
	if !ok {
		return
	}
	st, err := h.client.Cancel(r.Context(), id)
	if err != nil && !errors.Is(err, relay.ErrNotFound) {
		h.failDB(w, r, err)
		return
	}
	done := "no"
	if st.State == relay.StateCancelled {
		done = "yes"
	}
	http.Redirect(w, r, h.opts.BasePath+"/requests/"+id.String()+"?cancelled="+done, http.StatusSeeOther)
}

// search finds what its parameters name: q, a request's id (which goes
// to the request's page) or else a correlation id; correlation, only a
// correlation id (the link of a request's page, whose correlation id may
// be its own id).
func (h *handler) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	term := strings.TrimSpace(q.Get("q"))
	correlation := term
	if c := q.Get("correlation"); c != "" {
		correlation, term = c, ""
	}
	p := page{Title: "Search", Query: cmp.Or(term, correlation)}
	if correlation == "" {
		h.render(w, r, http.StatusOK, "search.html", p)
		return
	}
	if id, err := uuid.Parse(term); err == nil {
		_, err := h.client.Status(r.Context(), id)
		if err == nil {
			http.Redirect(w, r, h.opts.BasePath+"/requests/"+id.String(), http.StatusSeeOther)
			return
		}
		if !errors.Is(err, relay.ErrNotFound) {
			h.failDB(w, r, err)
			return
		}
	}
	found, err := h.client.FindByCorrelation(r.Context(), correlation, pageSize)
	if err != nil {
		h.failDB(w, r, err)
		return
	}
	p.Data = struct {
		Correlation string
		Found       []notification.Summary
		Full        bool // as many as a search shows: there may be more
	}{correlation, found, len(found) == pageSize}
	h.render(w, r, http.StatusOK, "search.html", p)
}

// when formats a time of the database for a page, in UTC to the
// millisecond (a timeline's entries often share their second); "" for
// zero.
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// duration formats a wait to the second, or to the millisecond under one.
func duration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// detail is an entry of a timeline entry's Detail.
type detail struct{ Key, Value string }

// details lists a timeline entry's Detail by key.
func details(m map[string]any) []detail {
	out := make([]detail, 0, len(m))
	for k, v := range m {
		out = append(out, detail{k, fmt.Sprint(v)})
	}
	slices.SortFunc(out, func(a, b detail) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
