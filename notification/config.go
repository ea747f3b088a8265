package notification

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/retrypolicy"
)

// Defaults of Config.
const (
	// ConsumerDefault names a dispatcher in the inbox when Config.Consumer
	// is empty.
	ConsumerDefault = "notification"
	// DeliveryTimeoutDefault is a dispatcher's delivery timeout until the
	// relay that runs it tells its HandTimeout (relay.Preparer): then the
	// default is five sixths of that, which leaves the claim and the
	// commit around the delivery the rest (25 s of the relay's default
	// 30 s).
	DeliveryTimeoutDefault = relay.HandTimeoutDefault * 5 / 6
	// InboxRetentionDefault outlives the relay's RetentionDefault, so a
	// claim outlives every redelivery of its request.
	InboxRetentionDefault = 4 * relay.RetentionDefault
	// QuietHoursJitterDefault spreads the requests a quiet window held
	// back over five minutes after it ends.
	QuietHoursJitterDefault = 5 * time.Minute
	// DedupRetentionDefault remembers dedup keys as long as inbox claims.
	DedupRetentionDefault = InboxRetentionDefault
	// TransientLimitDefault and TransientWindowDefault suppress an address
	// after five transient failures reported within two weeks: a mailbox
	// full for that long, or a handset unreachable, is as good as gone.
	TransientLimitDefault  = 5
	TransientWindowDefault = 14 * 24 * time.Hour
	// ReceiptsAfterDefault is how long after a delivery its receipts are
	// fetched: the fifteen minutes Expo advises to wait.
	ReceiptsAfterDefault = 15 * time.Minute
	// ReceiptsKeepDefault is how long a provider keeps receipts: Expo
	// keeps them for a day.
	ReceiptsKeepDefault = 24 * time.Hour
)

// ErrConfig marks an invalid Config; the error names the field.
var ErrConfig = errors.New("notification: invalid config")

// Commit says how the inbox claims of a channel's requests commit.
type Commit int

const (
	// CommitAuto, the zero value, follows what the channel's delivery
	// declares (delivery.Repeater): CommitShared when a repeated send
	// costs nothing (delivery.RepeatDropped, delivery.RepeatImpossible),
	// CommitEach otherwise.
	CommitAuto Commit = iota
	// CommitEach gives every request a transaction and a commit of its
	// own: the smallest window in which a crash or a lost commit makes the
	// provider see a request twice, at the price of one commit each. The
	// transaction commits the delivery's inbox claim; the relay writes the
	// outcome after it, with other requests' outcomes in one statement
	// (until then Status says pending, and the claim already keeps the
	// request from being delivered again). A request with a dedup key
	// claims its key in its claim's statement, and commits the provider's
	// reference with them.
	CommitEach
	// CommitShared lets the requests of one claimed batch and channel share
	// a transaction and its commit: one commit for the lot, and one
	// statement for their claims and one for their outcomes, which commit
	// with the claims. A commit that
	// fails or loses its answer offers every delivered request of the lot
	// again, each under its own idempotency key. A slow delivery holds the
	// commit of the others no longer than the delivery timeout.
	CommitShared
)

// Config configures a Dispatcher. The zero value of each field means its
// default; NewDispatcher copies it and never changes the caller's. The
// pool, the schema and the relay's limits come from the relay that runs
// the dispatcher (relay.Supervise calls Prepare): they are named once, in
// relay.Config.
type Config struct {
	// Consumer names the dispatcher in the inbox: a lower-case identifier.
	// Two dispatchers with the same Consumer deliver a request once between
	// them; a Client cancels under the same name. Default
	// ConsumerDefault ("notification").
	Consumer string

	// Deliveries maps each channel (a lower-case identifier) to the
	// delivery that performs it. At least one is required. The map is
	// copied.
	Deliveries map[string]delivery.Delivery

	// Commit chooses, per channel, how its requests' claims commit; a
	// channel missing from the map is CommitAuto.
	Commit map[string]Commit

	// Policy says how often and how far apart a request that answered
	// Retry is offered again. The zero Policy is retrypolicy's defaults:
	// 10 attempts, 15 s doubling to at most 1 h, randomised to 75-100 %.
	// Its MaxAttempts must stay below the relay's MaxHands, which also
	// counts crashes; Supervise refuses to start otherwise.
	Policy retrypolicy.Policy

	// DeliveryTimeout ends the context of each delivery call; an overrun is
	// a Retry. It must be shorter than the relay's HandTimeout, leaving room
	// for the claim and the commit; Supervise refuses to start otherwise.
	// Default five sixths of the relay's HandTimeout (25 s of 30 s).
	DeliveryTimeout time.Duration

	// InboxRetention is how long claims are kept before Purge removes them:
	// longer than any redelivery of a request. Supervise refuses to start
	// unless it exceeds the relay's Lease plus the Policy's longest retry
	// schedule (retrypolicy.Policy.Span). Default 28 days.
	InboxRetention time.Duration

	// Categories declares the categories requests may name
	// (Request.Category): which are critical, and the defaults per
	// channel where a subject has no preference. A request of a category
	// not declared here is dead with the code category.unknown. Nil
	// declares none and accepts any category, on by default everywhere.
	Categories map[string]Category

	// QuietHoursJitter spreads the requests that quiet hours deferred over
	// this long after their window ends, so that a morning does not start
	// with a burst. Default QuietHoursJitterDefault (5 minutes); negative
	// means none.
	QuietHoursJitter time.Duration

	// DedupRetention is how long a dedup key (Request.DedupKey) is
	// remembered after the delivery that claimed it: a request with the
	// key that comes due later is delivered again. Default
	// DedupRetentionDefault (28 days).
	DedupRetention time.Duration

	// Resolvers maps a channel to the Resolver that turns its requests'
	// recipients into the addresses they go to, for requests that name a
	// person (a user id) and leave the address to the moment of delivery.
	// A channel without one delivers to the recipient as staged. The map
	// is copied.
	Resolvers map[string]Resolver

	// TransientLimit transient failures reported for one address (a soft
	// bounce, a delay, an unreachable handset) within TransientWindow
	// suppress it, with ReasonTransientLimit; the failures of one message
	// (a delay reported at each of the provider's retries) count once.
	// Default
	// TransientLimitDefault (5); negative is an error.
	TransientLimit int

	// TransientWindow is how far back transient failures count. Default
	// TransientWindowDefault (14 days); negative is an error.
	TransientWindow time.Duration

	// Receipts maps a channel to the provider's receipts to fetch for each
	// request it delivered, some time after (Expo's push receipts): see
	// Receipts. The map is copied.
	Receipts map[string]Receipts

	// Logger receives the dispatcher's logs. Nil discards them.
	Logger *slog.Logger

	// TracerProvider creates the span of each delivery. Nil means the
	// global one.
	TracerProvider trace.TracerProvider

	// MeterProvider creates the dispatcher's metrics. Nil means the global
	// one.
	MeterProvider metric.MeterProvider
}

func (c Config) withDefaults() Config {
	if c.Consumer == "" {
		c.Consumer = ConsumerDefault
	}
	if c.InboxRetention == 0 {
		c.InboxRetention = InboxRetentionDefault
	}
	if c.QuietHoursJitter == 0 {
		c.QuietHoursJitter = QuietHoursJitterDefault
	}
	if c.DedupRetention == 0 {
		c.DedupRetention = DedupRetentionDefault
	}
	if c.TransientLimit == 0 {
		c.TransientLimit = TransientLimitDefault
	}
	if c.TransientWindow == 0 {
		c.TransientWindow = TransientWindowDefault
	}
	c.Resolvers = maps.Clone(c.Resolvers)
	if c.Categories != nil {
		// The dispatcher reads them on every hand: a change the caller
		// makes later must not race with it.
		categories := make(map[string]Category, len(c.Categories))
		for name, cat := range c.Categories {
			cat.Defaults = maps.Clone(cat.Defaults)
			categories[name] = cat
		}
		c.Categories = categories
	}
	if len(c.Receipts) > 0 {
		receipts := make(map[string]Receipts, len(c.Receipts))
		for ch, r := range c.Receipts {
			r.After = cmp.Or(r.After, ReceiptsAfterDefault)
			r.Keep = cmp.Or(r.Keep, ReceiptsKeepDefault)
			receipts[ch] = r
		}
		c.Receipts = receipts
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if err := ident.Check("Consumer", c.Consumer); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(c.Deliveries) == 0 {
		return fmt.Errorf("%w: Deliveries is empty", ErrConfig)
	}
	for channel, d := range c.Deliveries {
		if err := ident.Check("Deliveries channel", channel); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if d == nil {
			return fmt.Errorf("%w: Deliveries[%q] is nil", ErrConfig, channel)
		}
	}
	for channel, mode := range c.Commit {
		if _, ok := c.Deliveries[channel]; !ok {
			return fmt.Errorf("%w: Commit[%q] names no channel of Deliveries", ErrConfig, channel)
		}
		if mode < CommitAuto || mode > CommitShared {
			return fmt.Errorf("%w: Commit[%q] is %d, not a Commit", ErrConfig, channel, mode)
		}
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: Policy: %w", ErrConfig, err)
	}
	if c.DeliveryTimeout < 0 {
		return fmt.Errorf("%w: DeliveryTimeout is negative", ErrConfig)
	}
	if c.InboxRetention < 0 {
		return fmt.Errorf("%w: InboxRetention is negative", ErrConfig)
	}
	if c.DedupRetention < 0 {
		return fmt.Errorf("%w: DedupRetention is negative", ErrConfig)
	}
	if c.TransientLimit < 0 {
		return fmt.Errorf("%w: TransientLimit is negative", ErrConfig)
	}
	if c.TransientWindow < 0 {
		return fmt.Errorf("%w: TransientWindow is negative", ErrConfig)
	}
	for channel, r := range c.Resolvers {
		if _, ok := c.Deliveries[channel]; !ok {
			return fmt.Errorf("%w: Resolvers[%q] names no channel of Deliveries", ErrConfig, channel)
		}
		if r == nil {
			return fmt.Errorf("%w: Resolvers[%q] is nil", ErrConfig, channel)
		}
	}
	for channel, r := range c.Receipts {
		switch _, ok := c.Deliveries[channel]; {
		case !ok:
			return fmt.Errorf("%w: Receipts[%q] names no channel of Deliveries", ErrConfig, channel)
		case r.Fetcher == nil:
			return fmt.Errorf("%w: Receipts[%q].Fetcher is nil", ErrConfig, channel)
		case r.After < 0 || r.Keep < 0:
			return fmt.Errorf("%w: Receipts[%q].After or .Keep is negative", ErrConfig, channel)
		case r.Keep <= r.After:
			return fmt.Errorf("%w: Receipts[%q].Keep (%s) must exceed .After (%s): the receipts would be gone when fetched",
				ErrConfig, channel, r.Keep, r.After)
		}
	}
	for name, cat := range c.Categories {
		if err := ident.Check("Categories key", name); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		for channel := range cat.Defaults {
			if _, ok := c.Deliveries[channel]; !ok && channel != "" {
				return fmt.Errorf("%w: Categories[%q].Defaults[%q] names no channel of Deliveries", ErrConfig, name, channel)
			}
		}
	}
	return nil
}
