// Package neterr describes a network or transport failure in words that
// are safe to store and log: the operation and the kind of failure, from a
// fixed vocabulary, never an address, a host name or a URL. The HTTP calls
// of httpcall and the SMTP exchanges of mail share it.
//
// neterr imports only the standard library.
package neterr
