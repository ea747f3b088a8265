package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseAge parses a duration as time.ParseDuration does ("90m", "36h"),
// or a number of days ("7d", "1.5d").
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		// Not NaN, and within what a time.Duration holds (about 106,751
		// days).
		if err != nil || !(n >= 0 && n*float64(24*time.Hour) < math.MaxInt64) {
			return 0, fmt.Errorf("%q is no duration: want such as 90m, 36h or 7d", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is no duration: want such as 90m, 36h or 7d", s)
	}
	return d, nil
}

// when is a flag for a point in time: an age ("2h", "7d": that long before
// now, by the database's clock), an RFC 3339 time
// ("2026-05-01T10:00:00Z") or a date ("2026-05-01", midnight UTC), from
// 1970 to 9999.
type when struct {
	raw string
	ago time.Duration // an age; at is zero then
	at  time.Time     // never zero for a time given
}

func (w *when) String() string { return w.raw }

func (w *when) Set(s string) error {
	*w = when{raw: s}
	if d, err := parseAge(s); err == nil {
		w.ago = d
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			if y := t.UTC().Year(); y < 1970 || y > 9999 {
				// The zero time (what an unset time.Time prints) among
				// them: it would read as "now" and flip the selection.
				return fmt.Errorf("%q is before 1970 or after 9999", s)
			}
			// In UTC: PostgreSQL takes offsets up to ±15:59, Go ±23:59.
			w.at = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("%q is no time: want an age (2h, 7d), an RFC 3339 time (2026-05-01T10:00:00Z) or a date (2026-05-01)", s)
}

// set reports whether the flag was given.
func (w *when) set() bool { return w.raw != "" }

// time returns the point in time, an age counted back from now; the zero
// time when the flag was not given.
func (w *when) time(now time.Time) time.Time {
	if !w.set() || !w.at.IsZero() {
		return w.at
	}
	return now.Add(-w.ago)
}
