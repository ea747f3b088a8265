// Package ident validates and quotes the PostgreSQL identifiers tidings
// builds into SQL text: schema names, and the names used as NOTIFY channels.
package ident

import (
	"fmt"
	"strings"
)

// MaxLen is the longest identifier PostgreSQL keeps whole (NAMEDATALEN - 1).
const MaxLen = 63

// SchemaDefault is the schema of the library's tables when none is named;
// tidings.SchemaDefault exports it.
const SchemaDefault = "tidings"

// SchemaMaxLen is the longest schema name: its NOTIFY channel, the name
// followed by ChannelSuffix, must fit MaxLen too.
const SchemaMaxLen = MaxLen - len(ChannelSuffix)

// ChannelSuffix follows the schema name in the NOTIFY channel that wakes
// the schema's relays.
const ChannelSuffix = ".outbox"

// Check reports whether name is a plain lower-case identifier: a letter or
// underscore, then letters, digits or underscores, at most MaxLen bytes.
// field names the value in the error, as in "schema".
//
// Names are checked, never escaped: a name that would need quoting is an
// error, so the same name means the same object in every tool.
func Check(field, name string) error { return checkLen(field, name, MaxLen) }

// CheckSchema is Check for a schema name, which must be at most
// SchemaMaxLen bytes.
func CheckSchema(field, name string) error { return checkLen(field, name, SchemaMaxLen) }

func checkLen(field, name string, maxLen int) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", field)
	case len(name) > maxLen:
		return fmt.Errorf("%s is %d bytes long, at most %d allowed", field, len(name), maxLen)
	}
	for i, r := range name {
		ok := r == '_' || ('a' <= r && r <= 'z') || (i > 0 && '0' <= r && r <= '9')
		if !ok {
			return fmt.Errorf("%s %q: byte %d is not allowed (use a lower-case letter or underscore first, then lower-case letters, digits or underscores)", field, name, i)
		}
	}
	return nil
}

// Quote returns name as a double-quoted identifier. It is safe for any
// string, but callers quote only names that passed Check.
func Quote(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
