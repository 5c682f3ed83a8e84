package streamlog

import "hash/fnv"

// A chunk's Bloom filter holds the filter values of its messages (the
// stream protocol's filtering, and x-stream-filter-value over AMQP
// 0-9-1), so that a reader that wants some values skips the chunks that
// cannot hold them. Messages without a value are recorded as the empty
// value: a reader that also wants those (match-unfiltered) asks for it.
// A chunk without a filter has no message with a value.

// Bloom filter sizes (x-stream-filter-size-bytes), as RabbitMQ's.
const (
	MinBloomSize     = 16
	MaxBloomSize     = 255
	DefaultBloomSize = 16
	bloomHashes      = 3
)

// Bloom is a chunk's Bloom filter.
type Bloom []byte

// NewBloom returns an empty filter of size bytes (clamped to 16..255).
func NewBloom(size int) Bloom {
	return make(Bloom, min(max(size, MinBloomSize), MaxBloomSize))
}

func bloomBits(v string, n int) [bloomHashes]int {
	h := fnv.New64a()
	h.Write([]byte(v))
	s := h.Sum64()
	h1, h2 := uint32(s), uint32(s>>32)|1
	var out [bloomHashes]int
	for i := range out {
		out[i] = int((h1 + uint32(i)*h2) % uint32(n*8))
	}
	return out
}

// Add records value v.
func (b Bloom) Add(v string) {
	for _, i := range bloomBits(v, len(b)) {
		b[i/8] |= 1 << (i % 8)
	}
}

// Has reports whether v may have been added (false: it surely was not).
func (b Bloom) Has(v string) bool {
	if len(b) == 0 {
		return false
	}
	for _, i := range bloomBits(v, len(b)) {
		if b[i/8]&(1<<(i%8)) == 0 {
			return false
		}
	}
	return true
}

// Matches reports whether a chunk with filter b may hold a message a
// reader wants: one whose value is among values, or, with unfiltered,
// one without a value.
func Matches(b Bloom, values []string, unfiltered bool) bool {
	if len(b) == 0 {
		return unfiltered // no message of the chunk has a value
	}
	for _, v := range values {
		if b.Has(v) {
			return true
		}
	}
	return unfiltered && b.Has("")
}
