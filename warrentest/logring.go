package warrentest

import (
	"strings"
	"sync"
)

// clusterLogLines bounds what a test cluster keeps of its nodes' log.
const clusterLogLines = 400

// logRing keeps the last lines written to it: the log of a test cluster,
// shown when the test fails, so that a failure in CI says what the nodes
// did (a slog handler writes one record per Write).
type logRing struct {
	mu    sync.Mutex
	lines []string
	next  int // where the next line goes once the ring is full
	max   int
}

func newLogRing(max int) *logRing { return &logRing{max: max} }

func (r *logRing) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < r.max {
		r.lines = append(r.lines, line)
	} else {
		r.lines[r.next] = line
		r.next = (r.next + 1) % r.max
	}
	return len(p), nil
}

// String is the kept lines, oldest first.
func (r *logRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(append(append([]string(nil), r.lines[r.next:]...), r.lines[:r.next]...), "\n")
}
