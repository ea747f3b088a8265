// Package pgarray writes PostgreSQL array literals ('{"a","b"}') for the
// library's array parameters, so that a statement takes the same argument
// through lib/pq, pgx's database/sql driver and pgx itself: every driver
// sends a string as text, and the server parses it as the array type the
// statement casts it to ($1::text[]). It replaces lib/pq's pq.Array, whose
// import would put lib/pq in the dependency graph of every pgx service.
package pgarray

import (
	"database/sql"
	"math"
	"strconv"
	"strings"
)

// Elem is what an array may hold. A sql.NullString that is not Valid is a
// NULL element.
type Elem interface {
	string | int64 | float64 | sql.NullString
}

// Of returns s as an array literal, a string; a nil s is nil (SQL NULL),
// as pq.Array has it, and an empty one is "{}". Strings are always quoted,
// so that an empty string, "NULL", white space, braces, commas, quotes and
// backslashes come back as they went.
func Of[T Elem](s []T) any {
	if s == nil {
		return nil
	}
	var b strings.Builder
	b.Grow(size(s))
	b.WriteByte('{')
	for i, v := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		switch v := any(v).(type) {
		case sql.NullString:
			if v.Valid {
				quote(&b, v.String)
			} else {
				b.WriteString("NULL")
			}
		case string:
			quote(&b, v)
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case float64:
			float(&b, v)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// size is about the length of s's literal, exact for strings without a
// quote or backslash: the builder then grows once.
func size[T Elem](s []T) int {
	n := 2 + len(s)
	for _, v := range s {
		switch v := any(v).(type) {
		case sql.NullString:
			n += len(v.String) + 4
		case string:
			n += len(v) + 2
		default:
			n += 8
		}
	}
	return n
}

// float writes f as PostgreSQL reads a float8, infinities and NaN
// included.
func float(b *strings.Builder, f float64) {
	switch {
	case math.IsNaN(f):
		b.WriteString("NaN")
	case math.IsInf(f, 1):
		b.WriteString("Infinity")
	case math.IsInf(f, -1):
		b.WriteString("-Infinity")
	default:
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	}
}

// quote writes s as a quoted array element: a backslash before each quote
// and backslash. It writes the runs between them whole; a JSON document
// has a quote every few bytes.
func quote(b *strings.Builder, s string) {
	b.WriteByte('"')
	run := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b.WriteString(s[run:i])
			b.WriteByte('\\')
			run = i
		}
	}
	b.WriteString(s[run:])
	b.WriteByte('"')
}
