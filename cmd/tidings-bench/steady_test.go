package main

import (
	"testing"
	"time"
)

// A steady run's windows tell a tail of every second from one of a few:
// here two quiet seconds and one whose writers' commits stalled, which
// holds the run's worst p99.
func TestWindowsOf(t *testing.T) {
	var committed []int64
	var took []time.Duration
	var lat []float64
	for sec, w := range []struct {
		lat    float64
		commit time.Duration
	}{{1, time.Millisecond}, {30, 25 * time.Millisecond}, {2, time.Millisecond}} {
		for i := range 100 {
			committed = append(committed, int64(sec)*int64(time.Second)+int64(i)*int64(5*time.Millisecond))
			took = append(took, w.commit)
			lat = append(lat, w.lat)
		}
	}
	ws := windowsOf(committed, took, lat)
	if len(ws) != 3 {
		t.Fatalf("got %d windows of three seconds' commits, want 3: %+v", len(ws), ws)
	}
	if ws[0].p99 != 1 || ws[1].p99 != 2 {
		t.Errorf("the quiet windows' p99s are %v and %v, want 1 and 2, lowest first", ws[0].p99, ws[1].p99)
	}
	if worst := ws[2]; worst.p99 != 30 || worst.commitP50 != 25 {
		t.Errorf("the worst window has p99 %v ms and writers' commit p50 %v ms, want 30 and 25", worst.p99, worst.commitP50)
	}
}
