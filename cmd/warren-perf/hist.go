package main

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// Histogram is a log-bucketed histogram of non-negative int64 values (HDR
// style): values below 256 have a bucket each, above that every power of
// two is split into 128 buckets, so a bucket's width is at most 1/128 of
// its lower bound and the value reported for it (its middle) is within
// 0.4% of any value it holds. Record is lock-free and allocation-free for
// one writer; snapshots may be taken concurrently from other goroutines.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // 128 sub-buckets per power of two
	histBuckets = (64 - histSubBits + 1) * histSub
)

func bucketOf(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(v) - (histSubBits + 1) // >= 1
	m := v >> uint(e)                      // in [128, 255]
	return (e+1)*histSub + int(m) - histSub
}

// bucketRange returns the lowest value of bucket i and its width.
func bucketRange(i int) (low, width uint64) {
	if i < 2*histSub {
		return uint64(i), 1
	}
	e := i/histSub - 1
	m := uint64(i%histSub + histSub)
	return m << uint(e), 1 << uint(e)
}

// bucketValue is the value reported for bucket i: its middle.
func bucketValue(i int) float64 {
	low, w := bucketRange(i)
	if w == 1 {
		return float64(low)
	}
	return float64(low) + float64(w-1)/2
}

// Record adds v (negative values count as 0).
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(uint64(v))].Add(1)
	h.n.Add(1)
	h.sum.Add(uint64(v))
}

// HistSnap is a point-in-time copy of one or more histograms.
type HistSnap struct {
	Counts []uint64
	N, Sum uint64
}

// AddTo adds the histogram's current counts to s.
func (h *Histogram) AddTo(s *HistSnap) {
	if s.Counts == nil {
		s.Counts = make([]uint64, histBuckets)
	}
	for i := range h.counts {
		if c := h.counts[i].Load(); c != 0 {
			s.Counts[i] += c
		}
	}
	s.N += h.n.Load()
	s.Sum += h.sum.Load()
}

// Sub returns s minus an earlier snapshot of the same histograms.
func (s HistSnap) Sub(old HistSnap) HistSnap {
	r := HistSnap{Counts: make([]uint64, histBuckets), N: s.N - old.N, Sum: s.Sum - old.Sum}
	for i := range r.Counts {
		var o uint64
		if old.Counts != nil {
			o = old.Counts[i]
		}
		if s.Counts != nil {
			r.Counts[i] = s.Counts[i] - o
		}
	}
	// Counts are read bucket by bucket while writers go on: N may
	// disagree with the buckets by a few; trust the buckets.
	var n uint64
	for _, c := range r.Counts {
		n += c
	}
	r.N = n
	return r
}

// Quantile returns the value at quantile q (0..1), NaN when empty.
func (s HistSnap) Quantile(q float64) float64 {
	if s.N == 0 {
		return math.NaN()
	}
	target := uint64(math.Ceil(q * float64(s.N)))
	if target < 1 {
		target = 1
	}
	var cum uint64
	for i, c := range s.Counts {
		cum += c
		if cum >= target {
			return bucketValue(i)
		}
	}
	return bucketValue(len(s.Counts) - 1)
}

// Min and Max return the values of the lowest and highest non-empty
// buckets (NaN when empty).
func (s HistSnap) Min() float64 {
	for i, c := range s.Counts {
		if c != 0 {
			return bucketValue(i)
		}
	}
	return math.NaN()
}

func (s HistSnap) Max() float64 {
	for i := len(s.Counts) - 1; i >= 0; i-- {
		if s.Counts[i] != 0 {
			return bucketValue(i)
		}
	}
	return math.NaN()
}

// Mean is the exact mean of the recorded values.
func (s HistSnap) Mean() float64 {
	if s.N == 0 {
		return math.NaN()
	}
	return float64(s.Sum) / float64(s.N)
}
