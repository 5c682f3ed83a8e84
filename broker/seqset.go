package broker

// seqSet is a set of sequence numbers stored as bitmaps of 65,536 seqs, so
// that the acks of millions of messages, which come mostly in order, take
// a few bytes each at most (recovery, msgstore.go).
type seqSet struct {
	chunks map[uint64]*[1024]uint64
	n      int
}

func (s *seqSet) add(seq uint64) {
	if s.chunks == nil {
		s.chunks = map[uint64]*[1024]uint64{}
	}
	c := s.chunks[seq>>16]
	if c == nil {
		c = new([1024]uint64)
		s.chunks[seq>>16] = c
	}
	w, bit := (seq>>6)&1023, uint64(1)<<(seq&63)
	if c[w]&bit == 0 {
		c[w] |= bit
		s.n++
	}
}

func (s *seqSet) has(seq uint64) bool {
	c := s.chunks[seq>>16]
	return c != nil && c[(seq>>6)&1023]&(1<<(seq&63)) != 0
}

func (s *seqSet) remove(seq uint64) {
	c := s.chunks[seq>>16]
	if c == nil {
		return
	}
	w, bit := (seq>>6)&1023, uint64(1)<<(seq&63)
	if c[w]&bit != 0 {
		c[w] &^= bit
		s.n--
	}
}
