package qraft

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Record kinds the host writes to its log store.
const (
	recEntry     = 1 // a normal raft entry: Index, Term, Data = the entry's data
	recHardState = 2 // Data = marshaled raftpb.HardState
	recSnapshot  = 3 // a local snapshot's meta: Data = marshaled raftpb.Snapshot (no bodies)
	recLive      = 4 // a live (normal) entry received with a snapshot: Index, Term, Data
	recDelete    = 5 // the group was deleted: drop everything before
	recConf      = 6 // a ConfChange entry: Index, Term, Data
	recConfV2    = 7 // a ConfChangeV2 entry
)

// rec is one record of the node-wide log.
type rec struct {
	Group, Index, Term uint64
	Kind               byte
	Data               []byte
}

// recPos locates a record in the store (opaque to the host).
type recPos struct{ A, B uint64 }

// storeStats are the store's counters.
type storeStats struct {
	Syncs     uint64
	Appends   uint64
	Bytes     int64
	LiveBytes int64
	Segments  int
}

// logStore is the node-wide log every group's records go to.
type logStore interface {
	Append(recs []rec) ([]recPos, error) // buffered, no sync
	Sync() error                         // one sync for everything appended
	Read(p recPos) (rec, error)
	Replay(fn func(p recPos, r rec) error) error
	Release(p recPos)
	Stats() storeStats
	Close() error
	Crash() error // tests: close without flushing what was not synced
}

// fileStore is the simple single-file store: an append-only file of
// framed records ([len u32][crc32c u32][payload]); a torn or corrupt tail
// is truncated at Replay. It never shrinks (Release is a no-op).
type fileStore struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	off    int64 // end of what was appended (buffered included)
	noSync bool
	stats  storeStats
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func openFileStore(dir string, noSync bool) (*fileStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "qraft.log"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	s := &fileStore{f: f, noSync: noSync, stats: storeStats{Segments: 1}}
	return s, nil
}

func encodeRec(buf []byte, r rec) []byte {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, 0, 0, 0, 0)
	buf = append(buf, r.Kind)
	buf = binary.AppendUvarint(buf, r.Group)
	buf = binary.AppendUvarint(buf, r.Index)
	buf = binary.AppendUvarint(buf, r.Term)
	buf = append(buf, r.Data...)
	payload := buf[start+8:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(payload, crcTable))
	return buf
}

func decodePayload(p []byte) (rec, error) {
	if len(p) < 1 {
		return rec{}, errors.New("short record")
	}
	r := rec{Kind: p[0]}
	p = p[1:]
	for _, dst := range []*uint64{&r.Group, &r.Index, &r.Term} {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return rec{}, errors.New("bad record header")
		}
		*dst = v
		p = p[n:]
	}
	r.Data = p
	return r, nil
}

func (s *fileStore) Append(recs []rec) ([]recPos, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		if _, err := s.f.Seek(s.off, io.SeekStart); err != nil {
			return nil, err
		}
		s.w = bufio.NewWriterSize(s.f, 1<<20)
	}
	out := make([]recPos, len(recs))
	var buf []byte
	for i, r := range recs {
		buf = encodeRec(buf[:0], r)
		out[i] = recPos{A: uint64(s.off), B: uint64(len(buf))}
		if _, err := s.w.Write(buf); err != nil {
			return nil, err
		}
		s.off += int64(len(buf))
		s.stats.Appends++
		s.stats.Bytes += int64(len(buf))
	}
	return out, nil
}

func (s *fileStore) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		if err := s.w.Flush(); err != nil {
			return err
		}
	}
	if s.noSync {
		return nil
	}
	s.stats.Syncs++
	return s.f.Sync()
}

func (s *fileStore) Read(p recPos) (rec, error) {
	s.mu.Lock()
	if s.w != nil && s.w.Buffered() > 0 {
		if err := s.w.Flush(); err != nil {
			s.mu.Unlock()
			return rec{}, err
		}
	}
	s.mu.Unlock()
	buf := make([]byte, p.B)
	if _, err := s.f.ReadAt(buf, int64(p.A)); err != nil {
		return rec{}, err
	}
	return decodePayload(buf[8:])
}

// Replay reads every record in order and truncates a torn tail.
func (s *fileStore) Replay(fn func(p recPos, r rec) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	rd := bufio.NewReaderSize(s.f, 1<<20)
	var off int64
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(rd, hdr[:]); err != nil {
			break
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > 1<<30 {
			break
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(rd, payload); err != nil {
			break
		}
		if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
			break
		}
		r, err := decodePayload(payload)
		if err != nil {
			break
		}
		if err := fn(recPos{A: uint64(off), B: uint64(8 + n)}, r); err != nil {
			return err
		}
		off += int64(8 + n)
	}
	if err := s.f.Truncate(off); err != nil {
		return fmt.Errorf("qraft: truncate torn tail: %w", err)
	}
	s.off = off
	s.stats.Bytes = off
	s.w = nil
	return nil
}

func (s *fileStore) Release(recPos) {}

func (s *fileStore) Stats() storeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.LiveBytes = st.Bytes
	return st
}

func (s *fileStore) Close() error {
	err := s.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *fileStore) Crash() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Close()
}
