package notification

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Quiet windows are wall-clock spans in the subject's zone: they cross
// midnight, and keep their wall-clock edges over the nights the clocks
// change, in either direction and in two zones.
func TestQuietUntil(t *testing.T) {
	t.Parallel()
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		require.NoError(t, err)
		return loc
	}
	berlin, newYork := zone("Europe/Berlin"), zone("America/New_York")
	night := QuietWindow{Start: At(22, 0), End: At(7, 0)}
	weekdays := QuietWindow{Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		Start: At(22, 0), End: At(7, 0)}
	lunch := QuietWindow{Start: At(12, 0), End: At(13, 0), Channels: []string{"push"}}

	for _, tc := range []struct {
		name    string
		loc     *time.Location
		windows []QuietWindow
		channel string
		at      string // local wall time
		until   string // local wall time, "" for not quiet
	}{
		{"BeforeTheWindow", berlin, []QuietWindow{night}, "sms", "2026-06-10 21:59", ""},
		{"AtItsStart", berlin, []QuietWindow{night}, "sms", "2026-06-10 22:00", "2026-06-11 07:00"},
		{"AfterMidnight", berlin, []QuietWindow{night}, "sms", "2026-06-11 03:30", "2026-06-11 07:00"},
		{"AtItsEnd", berlin, []QuietWindow{night}, "sms", "2026-06-11 07:00", ""},
		// 2026-03-29 02:00 CET becomes 03:00 CEST: the night is an hour
		// shorter, and still ends at 07:00 on the wall clock.
		{"SpringForwardBerlin", berlin, []QuietWindow{night}, "sms", "2026-03-28 23:00", "2026-03-29 07:00"},
		// 2026-10-25 03:00 CEST becomes 02:00 CET: an hour longer.
		{"FallBackBerlin", berlin, []QuietWindow{night}, "sms", "2026-10-24 23:00", "2026-10-25 07:00"},
		// 2026-03-08 02:00 EST becomes 03:00 EDT; 2026-11-01 02:00 EDT
		// becomes 01:00 EST.
		{"SpringForwardNewYork", newYork, []QuietWindow{night}, "sms", "2026-03-08 01:30", "2026-03-08 07:00"},
		{"FallBackNewYork", newYork, []QuietWindow{night}, "sms", "2026-10-31 22:30", "2026-11-01 07:00"},
		// An end the clocks skip is the moment they jump: 02:30 does not
		// exist in Berlin that night, nor 02:00 and 02:30 in New York,
		// where time.Date would move it back to 01:30, an hour early.
		{"EdgeInTheGap", berlin, []QuietWindow{{Start: At(1, 0), End: At(2, 30)}}, "sms", "2026-03-29 01:30", "2026-03-29 03:00"},
		{"EdgeInTheGapNewYork", newYork, []QuietWindow{{Start: At(22, 0), End: At(2, 0)}}, "sms", "2026-03-07 23:00", "2026-03-08 03:00"},
		{"InsideAGapEndNewYork", newYork, []QuietWindow{{Start: At(1, 0), End: At(2, 30)}}, "sms", "2026-03-08 01:45", "2026-03-08 03:00"},
		// A window is the day it starts on: Friday night's ends Saturday
		// morning, and Saturday night has none.
		{"FridayNight", berlin, []QuietWindow{weekdays}, "sms", "2026-06-13 06:00", "2026-06-13 07:00"},
		{"SaturdayNight", berlin, []QuietWindow{weekdays}, "sms", "2026-06-13 23:00", ""},
		{"SundayMorning", berlin, []QuietWindow{weekdays}, "sms", "2026-06-14 06:00", ""},
		{"OtherChannel", berlin, []QuietWindow{lunch}, "sms", "2026-06-10 12:30", ""},
		{"ItsChannel", berlin, []QuietWindow{lunch}, "push", "2026-06-10 12:30", "2026-06-10 13:00"},
		// Windows that follow one another count as one.
		{"Chained", berlin, []QuietWindow{night, {Start: At(7, 0), End: At(8, 0)}}, "sms", "2026-06-10 23:00", "2026-06-11 08:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			at, err := time.ParseInLocation(time.DateTime[:16], tc.at, tc.loc)
			require.NoError(t, err)
			until, _ := quietUntil(QuietHours{Windows: tc.windows}, tc.loc, at.UTC(), tc.channel)
			if tc.until == "" {
				require.True(t, until.IsZero(), "not quiet, but until %s", until)
				return
			}
			want, err := time.ParseInLocation(time.DateTime[:16], tc.until, tc.loc)
			require.NoError(t, err)
			require.True(t, want.Equal(until), "want %s, got %s", want, until.In(tc.loc))
		})
	}

	// The spring-forward night in Berlin is an hour shorter: 23:00 CET to
	// 07:00 CEST is seven hours.
	at := time.Date(2026, 3, 28, 23, 0, 0, 0, berlin)
	until, _ := quietUntil(QuietHours{Windows: []QuietWindow{night}}, berlin, at, "sms")
	require.Equal(t, 7*time.Hour, until.Sub(at))
}

// On the night the clocks go back, a window's end that the clock shows
// twice is the next of the two: 2026-11-01 01:30 in New York is 05:30 UTC
// (EDT), and again 06:30 UTC (EST).
func TestQuietUntilInTheRepeatedHour(t *testing.T) {
	t.Parallel()
	newYork, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	utc := func(hh, mm int) time.Time { return time.Date(2026, 11, 1, hh, mm, 0, 0, time.UTC) }
	night := QuietHours{Windows: []QuietWindow{{Start: At(22, 0), End: At(1, 30)}}}
	for _, tc := range []struct {
		name      string
		at, until time.Time // zero until: not quiet
	}{
		{"FirstTime", utc(5, 10), utc(5, 30)},      // 01:10 EDT
		{"BetweenTheTwo", utc(5, 45), time.Time{}}, // 01:45 EDT
		{"SecondTime", utc(6, 10), utc(6, 30)},     // 01:10 EST
		{"AfterTheSecond", utc(6, 40), time.Time{}},
	} {
		until, _ := quietUntil(night, newYork, tc.at, "sms")
		require.True(t, tc.until.Equal(until), "%s: want %s, got %s", tc.name, tc.until, until)
	}
}

// The preference that applies is the most specific row; equally specific
// rows that disagree mean off; the category's defaults apply when no row
// does.
func TestPreferenceOf(t *testing.T) {
	t.Parallel()
	row := func(category, channel string, on bool) Preference {
		return Preference{Category: category, Channel: channel, Enabled: on}
	}
	optIn := Category{Defaults: map[string]bool{"": false, "mail": true}}
	for _, tc := range []struct {
		name     string
		rows     []Preference
		cat      Category
		category string
		channel  string
		want     bool
	}{
		{"NoRowNoDefault", nil, Category{}, "booking", "push", true},
		{"DefaultOff", nil, optIn, "marketing", "push", false},
		{"DefaultOnForItsChannel", nil, optIn, "marketing", "mail", true},
		{"EverythingOff", []Preference{row("", "", false)}, Category{}, "booking", "push", false},
		{"EverythingOffButBookingMail", []Preference{row("", "", false), row("booking", "mail", true)}, Category{}, "booking", "mail", true},
		{"EverythingOffBeatsTheDefault", []Preference{row("", "", false)}, optIn, "marketing", "mail", false},
		{"CategoryOff", []Preference{row("booking", "", false)}, Category{}, "booking", "mail", false},
		{"CategoryOffChannelOn", []Preference{row("booking", "", false), row("booking", "mail", true)}, Category{}, "booking", "mail", true},
		{"ChannelOff", []Preference{row("", "push", false)}, Category{}, "booking", "push", false},
		{"ChannelOffCategoryOnDisagree", []Preference{row("", "push", false), row("booking", "", true)}, Category{}, "booking", "push", false},
		{"ChannelOffCategoryAndChannelOn", []Preference{row("", "push", false), row("booking", "push", true)}, Category{}, "booking", "push", true},
		{"OtherCategoryIgnored", []Preference{row("marketing", "", false)}, Category{}, "booking", "push", true},
		{"OptInTurnedOn", []Preference{row("marketing", "", true)}, optIn, "marketing", "push", true},
		{"NoCategoryChannelOff", []Preference{row("", "sms", false)}, Category{}, "", "sms", false},
		{"NoCategoryEverythingOff", []Preference{row("", "", false)}, Category{}, "", "mail", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, detail := preferenceOf(tc.rows, tc.cat, tc.category, tc.channel)
			if !got {
				require.NotNil(t, detail, "a request stopped without a reason")
			}
			var why map[string]any
			if detail != nil {
				why = detail()
			}
			require.Equal(t, tc.want, got, "%v", why)
		})
	}
}

func TestTimeOfDayText(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]TimeOfDay{"22:00": At(22, 0), "07:05:09": At(7, 5) + 9, "00:00": 0, "23:59:59": At(23, 59) + 59} {
		var got TimeOfDay
		require.NoError(t, got.UnmarshalText([]byte(text)))
		require.Equal(t, want, got)
		b, err := got.MarshalText()
		require.NoError(t, err)
		require.Equal(t, text, string(b))
	}
	for _, bad := range []string{"", "24:00", "7", "07:60", "07:00:60", "a:b", "07:00:00:00", "-1:00"} {
		var got TimeOfDay
		require.Error(t, got.UnmarshalText([]byte(bad)), bad)
	}
}
