// Package buckets holds the bucket boundaries of the library's duration
// histograms, so that the relay's and the dispatcher's agree.
package buckets

import "go.opentelemetry.io/otel/metric"

// seconds are the boundaries, in seconds, from a millisecond to ten
// minutes: a claim and a commit take milliseconds, a provider call tens to
// hundreds of them, a hand at most HandTimeout (30 s by default), and a
// lag spans retries that back off to minutes. The SDK's default
// boundaries (0, 5, 10, 25, ... 10,000) suit milliseconds, not seconds:
// every duration under 5 s would land in one bucket.
var seconds = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// Option gives a histogram of durations in seconds these boundaries.
func Option() metric.HistogramOption { return metric.WithExplicitBucketBoundaries(seconds...) }
