package wal

import (
	"fmt"
	"os"
	"path/filepath"
)

const deadBit = 1 << 31

// segment is one file of the log and the bookkeeping of its records.
//
// offs holds the offset of every record in append order, the top bit set
// for a record no longer referenced. That is 4 bytes a record while a
// segment is mostly live; once fewer than a quarter of its entries are live
// (and the segment is sealed) offs is pruned to the live records plus, after
// each, the (dead-marked) offset where it ends, so a record's size stays
// known: 8 bytes per live record then, never more than 16 in between.
type segment struct {
	num  uint32
	path string
	f    *os.File

	size     int64 // logical end: header + every frame appended (buffered included)
	written  int64 // bytes written to the file (differs from size only for the head)
	synced   int64 // bytes covered by a Sync (or by the roll that sealed it)
	sealed   bool
	prealloc bool // the file extends past size with zeros (the head only)

	offs      []uint32
	live      int   // live records
	liveBytes int64 // their frames' bytes

	compacting bool // Compact is copying its live records

	minOrig uint64 // smallest original key of its records (copies carry older ones); 0: none
}

// noteOrig records that a record with original key k is in s.
func (s *segment) noteOrig(k uint64) {
	if s.minOrig == 0 || k < s.minOrig {
		s.minOrig = k
	}
}

func segName(num uint32) string { return fmt.Sprintf("wal-%016x.seg", num) }

func parseSegName(name string) (uint32, bool) {
	var n uint64
	if len(name) != len("wal-0000000000000000.seg") {
		return 0, false
	}
	if _, err := fmt.Sscanf(name, "wal-%016x.seg", &n); err != nil || n == 0 || n > 1<<32-1 {
		return 0, false
	}
	return uint32(n), segName(uint32(n)) == name
}

func newSegment(dir string, num uint32) *segment {
	return &segment{num: num, path: filepath.Join(dir, segName(num))}
}

// find returns the index in offs of the entry at off, or -1.
func (s *segment) find(off uint32) int {
	lo, hi := 0, len(s.offs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.offs[m]&^deadBit < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(s.offs) && s.offs[lo]&^deadBit == off {
		return lo
	}
	return -1
}

// end returns where the record at index i ends.
func (s *segment) end(i int) int64 {
	if i+1 < len(s.offs) {
		return int64(s.offs[i+1] &^ deadBit)
	}
	return s.size
}

// kill marks entry i dead and returns the record's frame size.
func (s *segment) kill(i int) int64 {
	n := s.end(i) - int64(s.offs[i])
	s.offs[i] |= deadBit
	s.live--
	s.liveBytes -= n
	return n
}

// maybePrune shrinks offs of a sealed segment once few of its entries are
// live.
func (s *segment) maybePrune() {
	if !s.sealed || len(s.offs) < 64 || s.live*4 >= len(s.offs) {
		return
	}
	n := 0
	for i, o := range s.offs {
		if o&deadBit == 0 {
			n++
			if i+1 < len(s.offs) && s.offs[i+1]&deadBit != 0 {
				n++
			}
		}
	}
	out := make([]uint32, 0, n)
	for i, o := range s.offs {
		if o&deadBit == 0 {
			out = append(out, o)
			if i+1 < len(s.offs) && s.offs[i+1]&deadBit != 0 {
				out = append(out, s.offs[i+1])
			}
		}
	}
	s.offs = out
}

// seal marks the segment full and trims offs to its length.
func (s *segment) seal() {
	s.sealed = true
	if cap(s.offs) > len(s.offs)+len(s.offs)/8 {
		s.offs = append([]uint32(nil), s.offs...)
	}
	s.maybePrune()
}

// liveRecs returns the [off, end) of every live record.
func (s *segment) liveRecs() [][2]int64 {
	out := make([][2]int64, 0, s.live)
	for i, o := range s.offs {
		if o&deadBit == 0 {
			out = append(out, [2]int64{int64(o), s.end(i)})
		}
	}
	return out
}
