//go:build !race

package integration

// fzRace shortens the session fuzzer's default run under the race detector.
const fzRace = false
