//go:build race

package testutil

// Race reports whether the race detector is on: code runs several times
// slower, and timings tuned for tests (a cluster's Raft tick) are
// stretched to match.
const Race = true
