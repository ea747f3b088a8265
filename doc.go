// Package tidings lets a service tell people things (mail, push, SMS,
// in-app) because a database write happened: reliably, without making the
// write wait on a provider, and without losing or doubling a message.
//
// The work is done by its packages: relay (the outbox, its supervisor and
// its operation), inbox (the once-per-consumer claim), and the notification
// layer built on them. This package holds what spans them: Migrate.
package tidings
