package notification

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

// Codes of the recipient rules' decisions (relay.Result.WithCode). A
// request a rule ends is processed, not dead: no bulk re-emit of dead
// requests sends it; Status.Outcome says what became of it.
const (
	CodeSkipped         = "policy.skipped"           // a preference or a category's default stopped it
	CodeQuietHours      = "policy.quiet_hours"       // deferred to the end of the subject's quiet window
	CodeExpired         = "policy.expired"           // past Request.ExpiresAt before it could go out
	CodeDuplicate       = "policy.duplicate"         // another request with its dedup key was delivered first
	CodeDedupWait       = "policy.dedup_wait"        // waits for a request with its dedup key in the same transaction
	CodeUnknownCategory = "category.unknown"         // Config.Categories does not declare its category
	CodeSecretErased    = "secret.erased"            // re-emitted after its secrets were erased
	CodeSuppressed      = "policy.suppressed"        // its address is suppressed (a bounce, a complaint, an unsubscribe)
	CodeUnresolved      = "recipient.unresolved"     // its channel's Resolver knows no address for its recipient, or a bad one
	CodeResolveFailed   = "recipient.resolve_failed" // its channel's Resolver failed: retried as the Policy says
)

// Outcome is what became of a processed request.
type Outcome string

// Outcomes of a processed request (Status.Outcome).
const (
	OutcomeDelivered  Outcome = "delivered"  // the provider accepted it
	OutcomeSkipped    Outcome = "skipped"    // a preference or a category's default stopped it
	OutcomeExpired    Outcome = "expired"    // it expired before it could go out
	OutcomeDuplicate  Outcome = "duplicate"  // a request with its dedup key was delivered first
	OutcomeSuppressed Outcome = "suppressed" // its address is suppressed
)

// outcomeOf is the Outcome of a processed request settled with code.
func outcomeOf(code string) Outcome {
	switch code {
	case CodeSkipped:
		return OutcomeSkipped
	case CodeExpired:
		return OutcomeExpired
	case CodeDuplicate:
		return OutcomeDuplicate
	case CodeSuppressed:
		return OutcomeSuppressed
	}
	return OutcomeDelivered
}

// The rules a decision names, as the metric MetricDecisions counts them
// (AttrRule) and the timeline's detail says.
const (
	RulePreference  = "preference"
	RuleQuietHours  = "quiet_hours"
	RuleExpiry      = "expiry"
	RuleDedup       = "dedup"
	RuleSuppression = "suppression"
)

// rules is what the recipient rules read of a batch's subjects and
// addresses (rulesRead), and the database's clock.
type rules struct {
	now         time.Time
	preferences map[string][]Preference
	quiet       map[string]quietOf
	suppressed  map[destination][]Suppression
}

// destination is a channel and an address on it, normalised.
type destination struct{ channel, address string }

// destinationOf is where j goes: its channel, and its (resolved)
// recipient normalised as suppressions are.
func destinationOf(j *job) destination {
	return destination{j.p.Channel, feedback.NormalizeAddress(j.p.Channel, j.p.Recipient)}
}

// suppressionOf returns the suppression that stops a request of category
// to dst: of its address, in every category or in category.
func (r rules) suppressionOf(dst destination, category string) (Suppression, bool) {
	for _, s := range r.suppressed[dst] {
		if s.Scope == "" || s.Scope == category {
			return s, true
		}
	}
	return Suppression{}, false
}

// detail is what a request's timeline says of the suppression that
// stopped it: never the address.
func (s Suppression) detail() map[string]any {
	return map[string]any{"rule": RuleSuppression, "channel": s.Channel, "scope": s.Scope, "class": string(s.Class),
		"reason": s.Reason, "provider": s.Provider, "source": s.Source, "since": s.CreatedAt}
}

// quietOf is a subject's quiet hours with their zone loaded.
type quietOf struct {
	QuietHours
	loc *time.Location
}

// scope is what a request's preference depends on: its subject, category
// and channel.
type scope struct{ subject, category, channel string }

// readRules reads the recipient rules of jobs, in one statement.
func (d *Dispatcher) readRules(ctx context.Context, bind *binding, jobs []job) (rules, error) {
	rows, err := bind.db.QueryContext(ctx, bind.policy.rules, d.ruleArgs(jobs)...)
	var r rules
	if err == nil {
		defer rows.Close()
		_, _, r, err = d.readClaim(ctx, rows)
	}
	if err != nil {
		return r, fmt.Errorf("read the recipient rules: %w", err)
	}
	return r, nil
}

// ruleArgs are the arguments of rulesRead for jobs: the scopes of their
// subjects' preferences and quiet hours and their destinations, each
// once. A critical request bypasses its subject's preferences and quiet
// hours: they are not read for it. A request without an address has no
// destination.
func (d *Dispatcher) ruleArgs(jobs []job) []any {
	var subjects, scopeSubjects, categories, scopeChannels, channels, addresses []string
	seenSubject := make(map[string]bool, len(jobs))
	seenScope, seenDest := make(map[scope]bool, len(jobs)), make(map[destination]bool, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		if j.unresolved != nil {
			continue
		}
		if s := j.req.Subject; s != "" && !j.req.Critical && !d.cfg.Categories[j.req.Category].Critical {
			if sc := (scope{s, j.req.Category, j.req.Channel}); !seenScope[sc] {
				seenScope[sc] = true
				scopeSubjects, categories, scopeChannels = append(scopeSubjects, s), append(categories, sc.category), append(scopeChannels, sc.channel)
				if !seenSubject[s] {
					seenSubject[s] = true
					subjects = append(subjects, s)
				}
			}
		}
		if dst := destinationOf(j); !seenDest[dst] {
			seenDest[dst] = true
			channels, addresses = append(channels, dst.channel), append(addresses, dst.address)
		}
	}
	return []any{pgarray.Of(subjects), pgarray.Of(scopeSubjects), pgarray.Of(categories), pgarray.Of(scopeChannels),
		pgarray.Of(channels), pgarray.Of(addresses)}
}

// readClaim reads the rows of a claimOne or claimBatch statement, the
// rules read after it or alone: the requests claimed for the first time,
// the dedup keys taken, and the recipient rules.
func (d *Dispatcher) readClaim(ctx context.Context, rows dbtx.Rows) (first map[uuid.UUID]bool, keys map[string]bool, r rules, err error) {
	first, keys = map[uuid.UUID]bool{}, map[string]bool{}
	r = rules{preferences: map[string][]Preference{}, quiet: map[string]quietOf{}, suppressed: map[destination][]Suppression{}}
	// One set of destinations for every row (Scan sets each column, NULL
	// or not): a set per row would be eight allocations per row.
	var (
		kind, subject           string
		category, channel, zone sql.NullString
		enabled                 sql.NullBool
		at                      sql.NullTime
		windows                 []byte
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &subject, &category, &channel, &enabled, &at, &zone, &windows); err != nil {
			return nil, nil, r, err
		}
		switch kind {
		case "c":
			id, err := uuid.Parse(subject)
			if err != nil {
				return nil, nil, r, err
			}
			first[id] = true
		case "k":
			keys[subject] = true
		case "n":
			r.now = at.Time
		case "p":
			r.preferences[subject] = append(r.preferences[subject], Preference{Category: category.String,
				Channel: channel.String, Enabled: enabled.Bool, UpdatedAt: at.Time})
		case "q":
			if q, ok := d.quietOf(ctx, zone.String, windows); ok {
				r.quiet[subject] = q
			}
		case "s":
			// subject holds the address, category the scope, zone the
			// reason, windows the rest.
			sp := Suppression{Channel: channel.String, Address: subject, Scope: category.String, Reason: zone.String, CreatedAt: at.Time}
			var rest struct {
				Class    feedback.Class `json:"class"`
				Provider string         `json:"provider"`
				Source   string         `json:"source"`
			}
			if err := json.Unmarshal(windows, &rest); err != nil {
				return nil, nil, r, fmt.Errorf("a suppression: %w", err)
			}
			sp.Class, sp.Provider, sp.Source = rest.Class, rest.Provider, rest.Source
			dst := destination{sp.Channel, sp.Address}
			r.suppressed[dst] = append(r.suppressed[dst], sp)
		}
	}
	return first, keys, r, rows.Err()
}

// windowsKept bounds the distinct sets of quiet windows a dispatcher keeps
// decoded: subjects mostly share a few, and a set past the bound is
// decoded at each read.
const windowsKept = 1024

// quietCache is what quietOf loads and decodes once per dispatcher. Its
// lookups take the bytes and the names as the rows hold them, without
// copying them.
type quietCache struct {
	mu      sync.RWMutex
	zones   map[string]*time.Location // IANA name -> zone; only valid names are stored
	windows map[string][]QuietWindow  // windows as stored -> decoded, at most windowsKept
}

func (c *quietCache) get(zone string, windows []byte) (loc *time.Location, w []QuietWindow, haveLoc, haveW bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	loc, haveLoc = c.zones[zone]
	w, haveW = c.windows[string(windows)]
	return loc, w, haveLoc, haveW
}

func (c *quietCache) put(zone string, loc *time.Location, windows []byte, w []QuietWindow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.zones == nil {
		c.zones, c.windows = map[string]*time.Location{}, map[string][]QuietWindow{}
	}
	c.zones[zone] = loc
	if _, ok := c.windows[string(windows)]; !ok && len(c.windows) < windowsKept {
		c.windows[string(windows)] = w
	}
}

// quietOf reads a subject's quiet hours, with their windows decoded and
// their zone loaded once per dispatcher; false for hours it cannot use,
// which it logs.
func (d *Dispatcher) quietOf(ctx context.Context, zone string, windows []byte) (quietOf, bool) {
	loc, w, haveLoc, haveW := d.quiet.get(zone, windows)
	if !haveW {
		if err := json.Unmarshal(windows, &w); err != nil {
			d.log.WarnContext(ctx, "ignoring undecodable quiet hours", "err", err)
			return quietOf{}, false
		}
	}
	if !haveLoc {
		var err error
		if loc, err = time.LoadLocation(zone); err != nil {
			d.log.WarnContext(ctx, "ignoring quiet hours in a time zone this machine does not know", "time_zone", zone, "err", err)
			return quietOf{}, false
		}
	}
	if !haveW || !haveLoc {
		d.quiet.put(zone, loc, windows, w)
	}
	return quietOf{QuietHours: QuietHours{TimeZone: zone, Windows: w}, loc: loc}, true
}

// decide applies the recipient rules r to the jobs claimed for the first
// time, and returns, by index, the results of those a rule ends or
// defers. The rules were read after the relay claimed the batch, so they
// see every change committed with the write that staged a request. A job
// whose inbox claim committed before was delivered by an earlier hand
// whose settle was lost: no rule ends it, and its claim answers it
// delivered.
func (d *Dispatcher) decide(r rules, jobs []job, first map[uuid.UUID]bool) map[int]relay.Result {
	skew := time.Until(r.now)
	stops := map[int]relay.Result{}
	for k := range jobs {
		j := &jobs[k]
		j.skew, j.skewKnown = skew, true
		if !first[j.p.ID] {
			continue
		}
		if res, rule, ok := d.decideOne(r, j, destinationOf(j)); ok {
			stops[k] = res
			if rule != "" {
				d.tel.decided(j.p.Channel, rule)
			}
		}
	}
	return stops
}

// Resolver turns the recipients of one channel's requests into the
// addresses their delivery sends to, for requests that name a person (a
// user id) and leave the address to the moment of delivery: a number
// corrected after a failure is then the one a re-emitted request uses.
// The dispatcher calls it once per claimed batch and channel, with the
// distinct recipients, before the recipient rules, so that the
// suppression of an address applies to the requests that resolve to it,
// and hands the delivery the address as Pending.Recipient. Its context
// ends after Config.DeliveryTimeout; only the requests of its channel
// wait for it.
//
// The map answers each recipient it knows; a recipient it leaves out, or
// answers with an address staging would refuse as a Recipient (a NUL,
// invalid UTF-8, more than RecipientMaxLen bytes), ends its requests dead
// with the code recipient.unresolved (re-emit them once the address
// exists), but for one an earlier hand delivered, which its committed
// inbox claim answers delivered. An error is a failure of the lookup, as
// a provider's outage is of a delivery: the channel's requests of the
// batch are retried as Config.Policy says, with the code
// recipient.resolve_failed, and are dead with the error once its attempts
// are spent. It is called concurrently for different batches.
type Resolver interface {
	Resolve(ctx context.Context, recipients []string) (map[string]string, error)
}

// ResolverFunc makes a plain function a Resolver.
type ResolverFunc func(ctx context.Context, recipients []string) (map[string]string, error)

// Resolve calls f(ctx, recipients).
func (f ResolverFunc) Resolve(ctx context.Context, recipients []string) (map[string]string, error) {
	return f(ctx, recipients)
}

// byResolver splits jobs into those of channels without a Resolver, ready
// to be delivered, and those of each channel with one.
func (d *Dispatcher) byResolver(jobs []job) (ready []job, lookups map[string][]job) {
	if len(d.cfg.Resolvers) == 0 {
		return jobs, nil // no copy of the (large) jobs
	}
	lookups = map[string][]job{}
	for _, j := range jobs {
		if _, ok := d.cfg.Resolvers[j.p.Channel]; ok {
			lookups[j.p.Channel] = append(lookups[j.p.Channel], j)
			continue
		}
		ready = append(ready, j)
	}
	return ready, lookups
}

// resolve gives the jobs of channel, which has a Resolver, their
// addresses, in one call for their distinct recipients that may take the
// DeliveryTimeout, and returns them, those it cannot resolve marked
// unresolved (dead, unless an earlier hand delivered them: decide
// checks). A failed call retries the jobs as a delivery's Retry is.
func (d *Dispatcher) resolve(ctx context.Context, bind *binding, b *relay.Batch, channel string, jobs []job) []job {
	var recipients []string
	seen := map[string]bool{}
	for _, j := range jobs {
		if !seen[j.p.Recipient] {
			seen[j.p.Recipient] = true
			recipients = append(recipients, j.p.Recipient)
		}
	}
	addresses, err := d.lookup(ctx, bind, channel, recipients)
	if err != nil {
		err = fmt.Errorf("resolve the recipients of channel %q: %w", channel, err)
		for _, j := range jobs {
			b.Answer(j.i, d.failed(j, delivery.Retry(delivery.WithCode(CodeResolveFailed, err))))
		}
		return nil
	}
	for k := range jobs {
		j := &jobs[k]
		// The address is checked as staging checks a Recipient.
		address := addresses[j.p.Recipient]
		switch err := checkRecipient("its address", address); {
		case address == "":
			j.unresolved = fmt.Errorf("the Resolver of channel %q has no address for the recipient", channel)
		case err != nil:
			j.unresolved = fmt.Errorf("the Resolver of channel %q answered an address that cannot be stored: %w", channel, err)
		default:
			j.p.Recipient = address
		}
	}
	return jobs
}

// lookup asks channel's Resolver for the addresses of recipients, within
// the DeliveryTimeout, turning a panic into an error that is tried again
// as a failed lookup is: a directory's bug must not take the process
// down, with every delivery in it, at each hand.
func (d *Dispatcher) lookup(ctx context.Context, bind *binding, channel string, recipients []string) (addresses map[string]string, err error) {
	defer func() {
		if r := recover(); r != nil {
			d.log.ErrorContext(ctx, "resolver panicked", "channel", channel, "panic", r)
			addresses, err = nil, fmt.Errorf("the Resolver panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, bind.timeout)
	defer cancel()
	return d.cfg.Resolvers[channel].Resolve(ctx, recipients)
}

// decideOne applies the rules to one request, going to dst: a result when
// a rule ends or defers it, with the rule MetricDecisions counts it by
// (none for a request that is dead), or decided false to deliver it.
func (d *Dispatcher) decideOne(r rules, j *job, dst destination) (res relay.Result, rule string, decided bool) {
	if j.unresolved != nil {
		return relay.Dead(j.unresolved).WithCode(CodeUnresolved), "", true
	}
	req := j.req
	if req.ExpiresAt != nil && !r.now.Before(*req.ExpiresAt) {
		return expired(*req.ExpiresAt, "expired before it could go out"), RuleExpiry, true
	}
	cat, declared := d.cfg.Categories[req.Category]
	if d.cfg.Categories != nil && req.Category != "" && !declared {
		return relay.Dead(fmt.Errorf("category %q is not declared in the dispatcher's Config.Categories", req.Category)).
			WithCode(CodeUnknownCategory), "", true
	}
	if len(req.SecretKeys) > 0 && j.rec.Secret == nil {
		return relay.Dead(errors.New("the request's secrets were erased when it ended; stage a new request")).
			WithCode(CodeSecretErased), "", true
	}
	if sp, ok := r.suppressionOf(dst, req.Category); ok {
		// Before the critical bypass: a bounced address takes no mail,
		// and an unsubscribed number must not be texted, whatever the
		// request is about.
		return relay.Done().WithCode(CodeSuppressed).WithDetail(sp.detail()), RuleSuppression, true
	}
	if req.Critical || cat.Critical {
		return relay.Result{}, "", false
	}
	if on, detail := preferenceOf(r.preferences[req.Subject], cat, req.Category, req.Channel); !on {
		return relay.Done().WithCode(CodeSkipped).WithDetail(detail()), RulePreference, true
	}
	q, ok := r.quiet[req.Subject]
	if !ok {
		return relay.Result{}, "", false
	}
	at := r.now
	if req.QuietAsOf == "staging" {
		at = j.rec.CreatedAt
	}
	until, w := quietUntil(q.QuietHours, q.loc, at, req.Channel)
	if !until.After(r.now) {
		return relay.Result{}, "", false
	}
	if req.ExpiresAt != nil && !req.ExpiresAt.After(until) {
		return expired(*req.ExpiresAt, "expires before the quiet window "+w.describe()+" ends"), RuleExpiry, true
	}
	// Spread over the jitter, and never past half the time the request
	// has left after the window: it must still go out before it expires.
	spread := d.cfg.QuietHoursJitter
	if req.ExpiresAt != nil {
		spread = min(spread, req.ExpiresAt.Sub(until)/2)
	}
	var jitter time.Duration
	if spread > 0 {
		jitter = rand.N(spread)
	}
	return relay.Later(until.Sub(r.now) + jitter).WithCode(CodeQuietHours).WithDetail(map[string]any{
		"rule": RuleQuietHours, "window": w.describe(), "time_zone": q.TimeZone, "until": until,
		"as_of": map[bool]string{true: "staging", false: "hand"}[req.QuietAsOf == "staging"],
	}), RuleQuietHours, true
}

// expired is the result of a request that expired, at expiresAt, for why.
func expired(expiresAt time.Time, why string) relay.Result {
	return relay.Done().WithCode(CodeExpired).WithDetail(map[string]any{
		"rule": RuleExpiry, "expires_at": expiresAt, "why": why})
}

// dedupKey is the state of a dedup key that a claim's transaction found
// held by another request.
type dedupKey struct {
	eventID   uuid.UUID
	reference string
}

// claimKeys claims, inside tx, the dedup keys of the jobs claimed for the
// first time that no rule stopped (in id order, the order they were
// staged in), unless the inbox claim took them already and gave the ones
// it got as claimed. It adds to stopped, by job, the answers of those
// that must not be delivered: a duplicate of a request delivered before,
// or one that waits behind a request with its key in this same
// transaction. No job stopped keeps its inbox claim.
func (d *Dispatcher) claimKeys(ctx context.Context, bind *binding, tx *claimTx, jobs []job, first map[uuid.UUID]bool,
	claimed map[string]bool, stopped map[int]relay.Result) error {
	var keys []string
	var ids []string
	owner := map[string]uuid.UUID{} // key -> the oldest job of this transaction with it
	for k, j := range jobs {
		key := j.req.DedupKey
		if _, ruled := stopped[k]; key == "" || !first[j.p.ID] || ruled {
			continue
		}
		if o, ok := owner[key]; ok {
			stopped[k] = relay.Later(time.Second).WithCode(CodeDedupWait).WithDetail(map[string]any{
				"rule": RuleDedup, "waits_for": o.String()})
			continue
		}
		owner[key] = j.p.ID
		keys, ids = append(keys, key), append(ids, j.p.ID.String())
	}
	if len(keys) == 0 {
		return nil
	}
	if claimed == nil {
		var err error
		if claimed, err = scanKeys(tx.QueryContext(ctx, bind.policy.claimKeys, d.cfg.Consumer, pgarray.Of(keys), pgarray.Of(ids))); err != nil {
			return fmt.Errorf("claim dedup keys: %w", err)
		}
	}
	var held []string
	for _, key := range keys {
		if !claimed[key] {
			held = append(held, key)
		}
	}
	if len(held) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, bind.policy.readKeys, d.cfg.Consumer, pgarray.Of(held))
	if err != nil {
		return fmt.Errorf("read dedup keys: %w", err)
	}
	defer rows.Close()
	found := map[string]dedupKey{}
	for rows.Next() {
		var key string
		var k dedupKey
		if err := rows.Scan(&key, &k.eventID, &k.reference); err != nil {
			return fmt.Errorf("read dedup keys: %w", err)
		}
		found[key] = k
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read dedup keys: %w", err)
	}
	for k, j := range jobs {
		key := j.req.DedupKey
		first, ok := found[key]
		if !ok || owner[key] != j.p.ID || first.eventID == j.p.ID {
			continue // not another's (released meanwhile, or its own): deliver
		}
		d.tel.decided(j.p.Channel, RuleDedup)
		// The first's reference goes in the detail, not the result: a
		// provider's report that names it is about the first request
		// only (FindByResult), not about every duplicate of it.
		stopped[k] = relay.Done().WithCode(CodeDuplicate).WithDetail(map[string]any{
			"rule": RuleDedup, "duplicate_of": first.eventID.String(), "reference": first.reference})
	}
	return nil
}

// scanKeys reads the keys a claimKeys statement returned.
func scanKeys(rows *sql.Rows, err error) (map[string]bool, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := map[string]bool{}
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, err
		}
		keys[key] = true
	}
	return keys, rows.Err()
}
