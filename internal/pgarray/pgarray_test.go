package pgarray_test

import (
	"database/sql"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// odd are strings an array literal must quote or escape to keep.
var odd = []string{"", "NULL", "null", " padded ", `a"b`, `back\slash`, `\`, `"`, "{}", "a,b", "{a,b}", "tab\there",
	"new\nline", "ünï©ødé", "'single'", "$1", "(1,2)", `\"a\\b"`}

func TestOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want any
	}{
		{pgarray.Of([]string(nil)), nil},
		{pgarray.Of([]string{}), "{}"},
		{pgarray.Of([]string{"a", "", `"q"`, `b\s`, "NULL"}), `{"a","","\"q\"","b\\s","NULL"}`},
		{pgarray.Of([]int64{1, -2, math.MaxInt64}), "{1,-2,9223372036854775807}"},
		{pgarray.Of([]float64{1.5, 0, math.Inf(1), math.Inf(-1), math.NaN(), 1e-300}), "{1.5,0,Infinity,-Infinity,NaN,1e-300}"},
		{pgarray.Of([]sql.NullString{{String: "x", Valid: true}, {}, {String: "NULL", Valid: true}}), `{"x",NULL,"NULL"}`},
	} {
		require.Equal(t, c.want, c.in)
	}
}

// The server reads back what was written, through each driver.
func TestOfRoundTrip(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, func(t *testing.T, d drivertest.Driver) {
		db := d.Open(t, pgtest.URL(t), 2)
		t.Run("Strings", func(t *testing.T) {
			rows, err := db.QueryContext(t.Context(), `SELECT x FROM unnest($1::text[]) WITH ORDINALITY AS u(x, i) ORDER BY i`, pgarray.Of(odd))
			require.NoError(t, err)
			defer rows.Close()
			var got []string
			for rows.Next() {
				var s string
				require.NoError(t, rows.Scan(&s))
				got = append(got, s)
			}
			require.NoError(t, rows.Err())
			require.Equal(t, odd, got)
		})
		t.Run("NullsAndNumbers", func(t *testing.T) {
			var nulls, n int
			var sum float64
			var total int64
			require.NoError(t, db.QueryRowContext(t.Context(), `SELECT
				(SELECT count(*) FROM unnest($1::text[]) x WHERE x IS NULL),
				cardinality($1::text[]),
				(SELECT sum(x) FROM unnest($2::float8[]) x),
				(SELECT sum(x) FROM unnest($3::bigint[]) x)`,
				pgarray.Of([]sql.NullString{{}, {String: "NULL", Valid: true}, {}}),
				pgarray.Of([]float64{0.25, 1e3}), pgarray.Of([]int64{math.MaxInt32, math.MaxInt32})).
				Scan(&nulls, &n, &sum, &total))
			require.Equal(t, 2, nulls, "only the invalid elements are NULL")
			require.Equal(t, 3, n)
			require.InDelta(t, 1000.25, sum, 1e-9)
			require.Equal(t, int64(2*math.MaxInt32), total)
		})
		t.Run("NilIsNull", func(t *testing.T) {
			var isNull bool
			require.NoError(t, db.QueryRowContext(t.Context(), `SELECT $1::text[] IS NULL`, pgarray.Of([]string(nil))).Scan(&isNull))
			require.True(t, isNull)
		})
	})
}

// FuzzOf checks that any string list survives the trip through a literal
// as PostgreSQL parses it, with a parser written from its documentation.
func FuzzOf(f *testing.F) {
	for _, s := range odd {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		lit := pgarray.Of([]string{a, b}).(string)
		require.Equal(t, []string{a, b}, parse(t, lit))
	})
}

// parse reads a one-dimensional literal of quoted elements.
func parse(t *testing.T, lit string) []string {
	require.True(t, len(lit) >= 2 && lit[0] == '{' && lit[len(lit)-1] == '}', lit)
	var out []string
	body := lit[1 : len(lit)-1]
	for i := 0; i < len(body); {
		require.Equal(t, byte('"'), body[i], "element at %d of %q is quoted", i, lit)
		var elem []byte
		i++
		for ; body[i] != '"'; i++ {
			if body[i] == '\\' {
				i++
			}
			elem = append(elem, body[i])
		}
		out = append(out, string(elem))
		i++
		if i < len(body) {
			require.Equal(t, byte(','), body[i])
			i++
		}
	}
	return out
}

// BenchmarkOf writes the literal of a batch's subjects, as the
// dispatcher's rules read does for each claimed batch.
func BenchmarkOf(b *testing.B) {
	subjects := make([]string, 375)
	for i := range subjects {
		subjects[i] = "subject-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = pgarray.Of(subjects)
	}
}

// BenchmarkOfPayloads writes the literal of a batch's payloads, as
// Outbox.StageBatch does: JSON, whose every quote is escaped.
func BenchmarkOfPayloads(b *testing.B) {
	payloads := make([]string, 500)
	for i := range payloads {
		payloads[i] = `{"channel":"mail","recipient":"user` + strconv.Itoa(i) +
			`@example.com","template":"welcome","data":{"name":"Ada","seq":` + strconv.Itoa(i) + `}}`
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = pgarray.Of(payloads)
	}
}
