// Command tidings operates the tables of tidings from a shell: it answers
// why a notification did not arrive, what is stuck and since when, and
// re-emits what died once the cause is fixed.
//
//	go install github.com/tidings-go/tidings/cmd/tidings@latest
//
// Usage:
//
//	tidings COMMAND [flags] [arguments]
//
// The commands:
//
//	migrate   apply the schema, or write its SQL files for goose or golang-migrate
//	status    one request (or a write's requests): state, reason, timeline
//	dead      list dead requests, or count them per reason, channel or module
//	reemit    hand dead requests back to their relays once the cause is fixed
//	cancel    cancel a pending request
//	purge     delete delivered and cancelled requests older than an age
//	stats     pending, due, oldest, dead, and the last minutes' rates
//	suppressions  list suppressed addresses
//	lift      lift the suppression of an address
//	serve     the operators' web page, on loopback
//
// Every command takes --database (default: the DATABASE_URL environment
// variable), a PostgreSQL connection string in either of lib/pq's forms,
// --schema (default "tidings") and --json, which prints one JSON document
// for scripts instead of tables (none when the command fails, or when
// status or cancel find no such request: the exit code says so). "tidings
// COMMAND -h" shows a command's flags and examples. Flags and arguments
// may come in any order; a value that is not text (a NUL byte, invalid
// UTF-8) is a usage error.
//
// Every command but migrate needs only what a production relay's role
// has: SELECT, INSERT, UPDATE and DELETE on the library's tables. migrate
// creates tables, and runs as the schema's owner.
//
// Recipients are personal data: no command prints one unless
// --show-recipients asks (dead and reemit), or --show-addresses
// (suppressions); a request's timeline holds none.
//
// Exit codes:
//
//	0  done
//	1  an error: the database could not be reached or answered one
//	2  usage: an unknown command or flag, a bad value, a missing argument,
//	   or reemit without --yes when standard input is no terminal
//	3  nothing matched: no such request, no dead request the filters
//	   select, a request that is no longer pending (cancel), or an
//	   address that is not suppressed (lift)
//	4  not confirmed: reemit asked, and the answer was not yes
package main
