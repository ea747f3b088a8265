// Package logbuf is a log destination that tests read back: a buffer safe
// for the relay's and the dispatcher's goroutines writing at once.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
