package broker

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4"
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/store"
	"github.com/warrenmq/warren/streamlog"
	"github.com/warrenmq/warren/streamraft"
)

// A stream (issue 25) is the fourth kind of queue: an append-only log on
// disk (streamlog) that each consumer reads from an offset of its own.
// Publishes are encoded as AMQP 1.0 messages (streammsg.go) on the
// publisher's goroutine and wait for the stream's writer, which packs
// what waits into one chunk, appends it, syncs it and then confirms: a
// confirmed message is on disk. Consumers read chunks from the files, so
// memory does not grow with the stream. The queue's machine only keeps
// the consumers' bookkeeping (exclusive consumers, counts, cancel on
// delete); it never holds a message.

const (
	// streamChunkBytes is the data the writer packs into one chunk at
	// most (a single larger message makes a chunk of its own).
	streamChunkBytes = 1 << 20
	// streamMaxPending bounds the encoded publishes that wait for the
	// writer; publishers block beyond it (the connection's backpressure).
	streamMaxPending = 16 << 20
	// streamRetentionEvery is how often a stream with x-max-age checks
	// its age retention (segments also go when one closes).
	streamRetentionEvery = 5 * time.Second
	// streamArena is the size of the blocks queued records are copied to.
	streamArena = 256 << 10
)

// encodeScratch holds the buffers publishes are encoded into.
var encodeScratch = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// streamState is a stream queue's log, writer and readers.
type streamState struct {
	q   *Queue
	log *streamlog.Log

	mu        sync.Mutex
	room      *sync.Cond // publishers wait for the writer here
	pend      []streamPub
	pendBytes int
	arena     []byte // where queued AMQP publishes' records are kept
	writing   bool
	closed    bool
	failed    error // a write that failed: later publishes are refused
	cons      map[*Consumer]*streamConsumer
	retention *time.Timer
	gone      chan struct{} // closed when the stream closes

	published atomic.Uint64
	delivered atomic.Uint64

	repl *streamRepl // in a cluster (streamrepl.go), nil on a single node
}

// streamPub is one piece of work for a stream's writer: an AMQP 0-9-1
// publish (rec, w), a stream-protocol Publish frame (op) or a stored
// offset (store).
type streamPub struct {
	rec    []byte // an AMQP 1.0 message
	filter string // its x-stream-filter-value
	w      *rwait
	op     *StreamPublish
	store  *streamStore
	// local: forwarded by another node's writer (streamAppendForPeer):
	// written here or refused, never forwarded again
	local bool
}

func (p *streamPub) size() int {
	switch {
	case p.op != nil:
		return p.op.size
	case p.store != nil:
		return 64
	}
	return len(p.rec)
}

// entries is how many chunk entries p takes at most.
func (p *streamPub) entries() int {
	switch {
	case p.op != nil:
		return len(p.op.IDs)
	case p.store != nil:
		return 0
	}
	return 1
}

type streamStore struct {
	ref    string
	offset uint64
}

// StreamPublish is what a stream-protocol publisher sends in one Publish
// frame: its messages as osiris entries (a message, or a sub-batch of
// several), each with its publishing id.
type StreamPublish struct {
	// Ref is the publisher's reference ("" when none): its ids are
	// deduplicated, an id not above the last one written is dropped
	// (and confirmed).
	Ref     string
	IDs     []uint64
	Entries [][]byte // each an osiris entry (streamlog.AppendEntry, AppendSubBatch)
	Records []uint16 // the records of each entry
	// Filters are the entries' filter values ("" none; nil: none has one).
	Filters []string
	// Done runs once, on the stream's writer, after the entries are on
	// disk (err nil) or could not be written.
	Done func(err error)
	size int
}

// streamFS is the file system of the broker's streams and the directory
// they live in: the data directory's "streams", or memory for a broker
// without one.
func (b *Broker) streamFS() (store.FS, string) {
	b.streamOnce.Do(func() {
		if b.streamDir == "" {
			b.streamMem = store.NewMemFS()
		}
	})
	if b.streamMem != nil {
		return b.streamMem, "/streams"
	}
	return store.OSFS{}, b.streamDir
}

// streamPath is the directory of stream name in vhost v.
func (v *VHost) streamPath(name string) (store.FS, string) {
	fs, dir := v.b.streamFS()
	return fs, filepath.Join(dir, url.PathEscape(v.Name), url.PathEscape(name))
}

// newStreamState opens q's log; fresh: a new stream, whose directory is
// emptied first (what a deleted stream of the same name left).
func newStreamState(q *Queue, fresh bool, members []string, group uint64) (*streamState, error) {
	fs, dir := q.vhost.streamPath(q.Name)
	s := &streamState{q: q, cons: map[*Consumer]*streamConsumer{}, gone: make(chan struct{})}
	s.room = sync.NewCond(&s.mu)
	if len(members) > 0 {
		s.repl = newStreamRepl(s, members, group)
	}
	if fresh {
		if l, err := streamlog.Open(dir, streamlog.Options{FS: fs}); err == nil {
			l.Delete()
		}
		if s.repl != nil {
			_ = fs.Remove(filepath.Join(dir, "raft.state"))
			_ = fs.Remove(filepath.Join(dir, "raft.base"))
			_ = fs.Remove(dir)
		}
	}
	// (a node that is not a member keeps an empty log, which it fills
	// if it becomes one)
	l, err := streamlog.Open(dir, s.options(fs))
	if err != nil {
		return nil, err
	}
	s.log = l
	if s.repl != nil {
		s.repl.register()
	}
	s.armRetention()
	return s, nil
}

func (s *streamState) options(fs store.FS) streamlog.Options {
	e := s.q.eff
	o := streamlog.Options{FS: fs, Now: s.q.vhost.b.clock.Now, Raft: s.repl != nil}
	if e.MaxLengthBytes != nil {
		o.MaxBytes = *e.MaxLengthBytes
	}
	if e.SegmentBytes != nil {
		o.MaxSegmentBytes = *e.SegmentBytes
	}
	o.MaxAge = parseMaxAge(e.MaxAge)
	return o
}

// ParseInterval reads an interval as x-max-age and x-stream-offset
// write one ("30m", "1h", "7D"): 0 when it is not one.
func ParseInterval(s string) time.Duration { return parseMaxAge(s) }

// committedRecords is how many records of a stream its readers can read
// (its messages, as RabbitMQ counts them).
func committedRecords(in streamlog.Info) int {
	return int(in.Committed - min(in.FirstOffset, in.Committed))
}

// maxAgeUnits are x-max-age's units.
var maxAgeUnits = map[byte]time.Duration{'Y': 365 * 24 * time.Hour, 'M': 30 * 24 * time.Hour, 'D': 24 * time.Hour,
	'h': time.Hour, 'm': time.Minute, 's': time.Second}

// parseMaxAge reads x-max-age ("7D"): RabbitMQ's units Y M D h m s (a
// year of 365 days, a month of 30).
func parseMaxAge(s string) time.Duration {
	if len(s) < 2 {
		return 0
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	unit := maxAgeUnits[s[len(s)-1]]
	return time.Duration(n) * unit
}

// armRetention runs the age retention every streamRetentionEvery while
// the stream has a max-age.
func (s *streamState) armRetention() {
	if parseMaxAge(s.q.eff.MaxAge) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.retention != nil {
		return
	}
	s.retention = time.AfterFunc(streamRetentionEvery, func() {
		if _, err := s.log.Retain(); err != nil && !errors.Is(err, streamlog.ErrClosed) {
			s.q.vhost.b.log.Warn("stream retention failed", "queue", s.q.Name, "vhost", s.q.vhost.Name, "err", err)
		}
		s.mu.Lock()
		s.retention = nil
		s.mu.Unlock()
		s.armRetention()
	})
}

// enqueue encodes m and hands it to the writer; r's wait (the confirm)
// ends once its chunk is on disk.
func (s *streamState) enqueue(m *Message, r *Router) enqueueResult {
	// Encoded into a scratch buffer, then copied into the stream's arena
	// (below, under its lock): no allocation per message.
	sp := encodeScratch.Get().(*[]byte)
	rec := streamEncode((*sp)[:0], m)
	var w *rwait
	if r != nil && !r.NoWait {
		if r.rw == nil {
			r.rw = &rwait{}
		}
		w = r.rw
		w.add(1)
	}
	filter, _ := m.Props.Headers["x-stream-filter-value"].(string)
	ok := s.queue(streamPub{rec: rec, w: w, filter: filter})
	if cap(rec) <= 64<<10 {
		*sp = rec[:0]
		encodeScratch.Put(sp)
	}
	if !ok {
		if w != nil {
			w.add(-1)
			r.failed = true
		}
		return enqueued
	}
	s.published.Add(1)
	return enqueued
}

// queue hands p to the writer, waiting while too much waits already;
// false when the stream is closed or failed.
func (s *streamState) queue(p streamPub) bool {
	s.mu.Lock()
	for s.pendBytes > streamMaxPending && !s.closed && s.failed == nil {
		s.room.Wait()
	}
	if s.closed || s.failed != nil {
		s.mu.Unlock()
		return false
	}
	if p.rec != nil {
		// into the arena: the writer's copies outlive the caller's buffer
		if cap(s.arena)-len(s.arena) < len(p.rec) {
			s.arena = make([]byte, 0, max(streamArena, len(p.rec)))
		}
		n := len(s.arena)
		s.arena = append(s.arena, p.rec...)
		p.rec = s.arena[n:len(s.arena):len(s.arena)]
	}
	s.pend = append(s.pend, p)
	s.pendBytes += p.size()
	start := !s.writing
	s.writing = true
	s.mu.Unlock()
	if start {
		go s.write()
	}
	return true
}

// Publish queues a stream-protocol publish; false when the stream is
// closed (op.Done is not called then).
func (s *streamState) publishOp(op *StreamPublish) bool {
	op.size = 0
	for _, e := range op.Entries {
		op.size += len(e)
	}
	if !s.queue(streamPub{op: op}) {
		return false
	}
	s.published.Add(uint64(len(op.IDs)))
	return true
}

// write appends what waits, a chunk at a time, until nothing does.
func (s *streamState) write() {
	var data []byte
	var done []streamPub
	writers := map[string]uint64{}
	for {
		s.mu.Lock()
		if len(s.pend) == 0 || s.closed {
			s.writing = false
			pend := s.pend
			s.pend, s.pendBytes = nil, 0
			s.room.Broadcast()
			s.mu.Unlock()
			for i := range pend {
				pend[i].finish(streamlog.ErrClosed)
			}
			return
		}
		if s.repl != nil && !s.repl.leading() {
			// Another node leads: what waits goes to its writer.
			done = append(done[:0], s.pend...)
			clear(s.pend)
			s.pend, s.pendBytes = nil, 0
			s.room.Broadcast()
			s.mu.Unlock()
			s.forward(done)
			clear(done)
			continue
		}
		// A stored offset is a chunk of its own; the publishes before it
		// go first.
		if st := s.pend[0].store; st != nil {
			s.pend = s.pend[1:]
			s.pendBytes -= 64
			s.room.Broadcast()
			s.mu.Unlock()
			now := s.q.vhost.b.clock.Now().UnixMilli()
			if s.repl != nil {
				if err := s.repl.storeOffset(st, now); err != nil {
					s.q.vhost.b.log.Debug("stream: storing an offset failed", "queue", s.q.Name, "err", err)
				}
			} else if err := s.log.StoreOffset(st.ref, st.offset, now, 1); err == nil {
				s.log.Commit()
			}
			continue
		}
		n, size, entries := 0, 0, 0
		for n < len(s.pend) && s.pend[n].store == nil {
			p := &s.pend[n]
			if n > 0 && (size+p.size() > streamChunkBytes || entries+p.entries() > streamlog.MaxEntries) {
				break
			}
			size += p.size()
			entries += p.entries()
			n++
		}
		done = append(done[:0], s.pend[:n]...)
		clear(s.pend[:n])
		s.pend = s.pend[n:]
		if len(s.pend) == 0 {
			s.pend = nil
		}
		s.pendBytes -= size
		s.room.Broadcast()
		s.mu.Unlock()

		data = data[:0]
		clear(writers)
		var ents, recs int
		var bloom streamlog.Bloom
		unfiltered := false
		filterOf := func(v string) {
			if v == "" {
				unfiltered = true
				return
			}
			if bloom == nil {
				size := streamlog.DefaultBloomSize
				if fs := s.q.eff.FilterSize; fs != nil {
					size = int(*fs)
				}
				bloom = streamlog.NewBloom(size)
			}
			bloom.Add(v)
		}
		for _, p := range done {
			switch {
			case p.op != nil:
				op := p.op
				last, seen := uint64(0), false
				if op.Ref != "" {
					if l, ok := writers[op.Ref]; ok {
						last, seen = l, true
					} else {
						last, seen = s.log.WriterSeq(op.Ref)
					}
				}
				for i, e := range op.Entries {
					if op.Ref != "" && seen && op.IDs[i] <= last {
						continue // a duplicate: dropped, confirmed
					}
					data = append(data, e...)
					ents++
					recs += int(op.Records[i])
					if i < len(op.Filters) {
						filterOf(op.Filters[i])
					} else {
						unfiltered = true
					}
					if op.Ref != "" {
						last, seen = op.IDs[i], true
						writers[op.Ref] = last
					}
				}
			default:
				data = streamlog.AppendEntry(data, p.rec)
				ents++
				recs++
				filterOf(p.filter)
			}
		}
		if bloom != nil && unfiltered {
			bloom.Add("") // messages without a value are there too
		}
		var err error
		switch {
		case ents > 0 && s.repl != nil:
			// the group commits it (a majority synced it); a failure
			// leaves the stream writable (the next leader takes over)
			err = s.repl.propose(&streamlog.Batch{Entries: uint16(ents), Records: uint32(recs), Data: data, Bloom: bloom,
				Timestamp: s.q.vhost.b.clock.Now().UnixMilli(), Writers: writers})
			if errors.Is(err, streamraft.ErrNotLeader) {
				// Not written: this node's own publishes go to the next
				// leader (the loop forwards them), others' are refused
				// (their node forwards them again).
				var again []streamPub
				for i := range done {
					if done[i].local {
						done[i].finish(errStreamNoLeader(s.q))
					} else {
						again = append(again, done[i])
					}
				}
				if !s.requeueFront(again) {
					for i := range again {
						again[i].finish(streamlog.ErrClosed)
					}
				}
				clear(done)
				continue
			}
			for i := range done {
				done[i].finish(err)
			}
			clear(done)
			continue
		case ents > 0:
			_, err = s.log.Append(&streamlog.Batch{Entries: uint16(ents), Records: uint32(recs), Data: data, Bloom: bloom,
				Timestamp: s.q.vhost.b.clock.Now().UnixMilli(), Epoch: 1, Writers: writers})
			if err == nil {
				err = s.log.Sync()
			}
		}
		if err != nil {
			s.q.vhost.b.log.Error("stream write failed: the stream refuses publishes", "queue", s.q.Name, "vhost", s.q.vhost.Name, "err", err)
			s.mu.Lock()
			s.failed = err
			s.room.Broadcast()
			s.mu.Unlock()
		} else if ents > 0 {
			s.log.Commit()
		}
		for i := range done {
			done[i].finish(err)
		}
		clear(done)
		if cap(data) > 4*streamChunkBytes {
			data = nil
		}
	}
}

// forward sends pubs to the leader's writer (a replicated stream that
// this node does not lead), waiting up to 10 s for a leader; the pubs a
// leader forwarded here are refused instead (it lost the leadership).
func (s *streamState) forward(pubs []streamPub) {
	var local, fwd []streamPub
	for _, p := range pubs {
		if p.local {
			local = append(local, p)
		} else {
			fwd = append(fwd, p)
		}
	}
	for i := range local {
		local[i].finish(errStreamNoLeader(s.q))
	}
	if len(fwd) == 0 {
		return
	}
	err := errStreamNoLeader(s.q)
	for end := time.Now().Add(streamLeaderWait); time.Now().Before(end); {
		l := s.repl.currentLeader(time.Until(end))
		if l.node == s.q.vhost.b.node {
			// this node leads now: its writer takes them
			for i := range fwd {
				fwd[i].local = true
			}
			if !s.requeueFront(fwd) {
				break
			}
			return
		}
		if l.node == "" {
			break
		}
		errs, retry := s.repl.forward(l.node, fwd)
		var again []streamPub
		for i := range fwd {
			if retry[i] {
				again = append(again, fwd[i])
			} else {
				fwd[i].finish(errs[i])
			}
		}
		if fwd = again; len(fwd) == 0 {
			return
		}
		// these were not written: they go to the next leader
		s.repl.waitChange(l, time.Until(end))
	}
	for i := range fwd {
		fwd[i].finish(err)
	}
}

// requeueFront gives pubs back to the writer ahead of what came since
// (the publishers' order); false when the stream is closed.
func (s *streamState) requeueFront(pubs []streamPub) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	for i := range pubs {
		s.pendBytes += pubs[i].size()
	}
	s.pend = append(pubs, s.pend...)
	return true
}

// streamLeaderWait bounds how long publishes wait for a stream's leader.
const streamLeaderWait = 10 * time.Second

func (p *streamPub) finish(err error) {
	switch {
	case p.w != nil:
		p.w.done(err)
	case p.op != nil && p.op.Done != nil:
		p.op.Done(err)
	}
}

// close stops the writer and the readers; the log is closed (deleted
// when del).
func (s *streamState) close(del bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.gone)
	if s.retention != nil {
		s.retention.Stop()
	}
	cons := make([]*streamConsumer, 0, len(s.cons))
	for _, c := range s.cons {
		cons = append(cons, c)
	}
	s.room.Broadcast()
	s.mu.Unlock()
	for _, c := range cons {
		c.stop()
	}
	// wait for the writer to finish the chunk it writes (it broadcasts
	// room as it stops)
	s.mu.Lock()
	for s.writing {
		s.room.Wait()
	}
	s.mu.Unlock()
	if s.repl != nil {
		s.repl.close(del)
	}
	if del {
		s.log.Delete()
		if s.repl != nil {
			fs, dir := s.q.vhost.streamPath(s.q.Name)
			_ = fs.Remove(filepath.Join(dir, "raft.state"))
			_ = fs.Remove(filepath.Join(dir, "raft.base"))
			_ = fs.Remove(dir)
		}
	} else {
		s.log.Close()
	}
}

// --- consumers ---

// streamConsumer reads the stream for one AMQP 0-9-1 consumer, from its
// own offset, as fast as its credit (the channel's prefetch) allows.
type streamConsumer struct {
	s    *streamState
	c    *Consumer
	r    *streamlog.Reader
	from uint64 // records below it are not delivered (the offset asked for)

	filters         []string
	matchUnfiltered bool

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once

	offset atomic.Uint64 // the next offset it delivers (for its lag)
}

func (sc *streamConsumer) stop() {
	sc.once.Do(func() { close(sc.quit) })
	<-sc.done
}

func (sc *streamConsumer) poke() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// wait blocks until woken, the log commits (when ch is not nil), or quit
// (false).
func (sc *streamConsumer) wait(ch <-chan struct{}) bool {
	t := time.NewTimer(500 * time.Millisecond) // a safety net only
	defer t.Stop()
	select {
	case <-sc.quit:
		return false
	case <-sc.wake:
	case <-ch:
	case <-t.C:
	}
	return true
}

func (sc *streamConsumer) run() {
	defer close(sc.done)
	defer sc.r.Close()
	q := sc.s.q
	var data []byte   // the rest of the chunk being read
	var off uint64    // the offset of data's first record
	var recs [][]byte // the records of the entry being read
	var recOff uint64 // the offset of recs[0]
	var held *Delivery
	for {
		if held != nil {
			if !sc.c.Sink.Deliver(sc.c, *held) {
				if !sc.wait(nil) {
					return
				}
				continue
			}
			sc.offset.Store(held.Seq + 1)
			sc.s.delivered.Add(1)
			held = nil
		}
		select {
		case <-sc.quit:
			return
		default:
		}
		switch {
		case len(recs) > 0:
			rec, o := recs[0], recOff
			recs, recOff = recs[1:], recOff+1
			if o < sc.from {
				continue
			}
			m, err := streamDecode(rec, q.Name)
			if err != nil {
				continue
			}
			h := make(amqp.Table, len(m.Props.Headers)+1)
			for k, v := range m.Props.Headers {
				h[k] = v
			}
			h["x-stream-offset"] = int64(o)
			m.Props.Headers = h
			m.Props.Flags |= amqp.FlagHeaders
			held = &Delivery{Queue: q, Msg: m, Seq: o, ConsumerTag: sc.c.Tag}
		case len(data) > 0:
			e, rest, err := streamlog.NextEntry(data)
			if err != nil {
				data = nil
				continue
			}
			data = rest
			if e.SubBatch {
				recs = subBatchRecords(e)
			} else {
				recs = append(recs[:0], e.Data)
			}
			recOff = off
			off += uint64(e.Records)
		default:
			wake := sc.s.log.Wait()
			c, err := sc.r.Next()
			if errors.Is(err, streamlog.ErrNoChunk) {
				if !sc.wait(wake) {
					return
				}
				continue
			}
			if err != nil {
				if !errors.Is(err, streamlog.ErrClosed) {
					q.vhost.b.log.Warn("stream read failed", "queue", q.Name, "vhost", q.vhost.Name, "err", err)
				}
				<-sc.quit
				return
			}
			if c.Type == streamlog.ChunkUser && (len(sc.filters) == 0 || streamlog.Matches(c.Bloom(), sc.filters, sc.matchUnfiltered)) {
				data, off = c.Data(), c.ID
			}
		}
	}
}

// eachRecord calls fn with the offset and bytes of each record of chunk
// c, in order, until fn returns false; it reports whether fn stopped it.
// The records of a sub-batch that does not decompress are skipped
// (subBatchRecords), their offsets counted.
func eachRecord(c *streamlog.Chunk, fn func(off uint64, rec []byte) bool) bool {
	data, off := c.Data(), c.ID
	for len(data) > 0 {
		e, rest, err := streamlog.NextEntry(data)
		if err != nil {
			return false
		}
		data = rest
		recs := [][]byte{e.Data}
		if e.SubBatch {
			recs = subBatchRecords(e)
		}
		for i, rec := range recs {
			if !fn(off+uint64(i), rec) {
				return true
			}
		}
		off += uint64(e.Records)
	}
	return false
}

// subBatchRecords are the records of a sub-batch entry (a stream-protocol
// publisher's), decompressed when the publisher compressed them with one
// of the protocol's codecs as RabbitMQ's clients write them (gzip, snappy
// framed, lz4 frames, zstd), within the uncompressed size the entry
// announces (and at most MaxChunkData): an AMQP 0-9-1 consumer reads them
// as any other. Beyond RabbitMQ: 4.3 skips compressed sub-batches for
// AMQP 0-9-1 consumers (rabbit_stream_queue: "it can only be consumed by
// Stream protocol clients"), which then miss messages the stream holds;
// 3.10 closes the consumer's channel on any sub-batch (541). A sub-batch
// that does not decompress is skipped, its offsets counted.
func subBatchRecords(e streamlog.Entry) [][]byte {
	b := e.Data
	if e.Compression != 0 {
		var err error
		if b, err = decompressSubBatch(e); err != nil {
			return nil
		}
	}
	var out [][]byte
	for range e.Records {
		if len(b) < 4 {
			break
		}
		n := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
		if len(b)-4 < n {
			break
		}
		out = append(out, b[4:4+n])
		b = b[4+n:]
	}
	return out
}

// Sub-batch compression codecs (the stream protocol's numbers).
const (
	compressGzip   = 1
	compressSnappy = 2
	compressLz4    = 3
	compressZstd   = 4
)

var errSubBatch = errors.New("stream: a sub-batch that does not decompress")

// decompressSubBatch decompresses a sub-batch's records, reading no more
// than the uncompressed size it announces.
func decompressSubBatch(e streamlog.Entry) ([]byte, error) {
	if e.Plain > streamlog.MaxChunkData {
		return nil, errSubBatch
	}
	src := bytes.NewReader(e.Data)
	var r io.Reader
	switch e.Compression {
	case compressGzip:
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, errSubBatch
		}
		r = zr
	case compressSnappy:
		r = snappy.NewReader(src)
	case compressLz4:
		r = lz4.NewReader(src)
	case compressZstd:
		// (the client's encoder's default window is 8 MiB; what is read
		// is bounded by the announced size below)
		zr, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(16<<20),
			zstd.WithDecoderMaxMemory(256<<20))
		if err != nil {
			return nil, errSubBatch
		}
		defer zr.Close()
		r = zr
	default:
		return nil, errSubBatch
	}
	out := make([]byte, e.Plain)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, errSubBatch
	}
	return out, nil
}

// streamOffsetSpec is where a consumer starts (x-stream-offset): the
// position to read from and the first offset it delivers.
func (s *streamState) startAt(args amqp.Table) (streamlog.Position, uint64, error) {
	l := s.log
	v, ok := args["x-stream-offset"]
	if !ok {
		return l.End(), 0, nil
	}
	bad := func() error {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid stream offset argument 'x-stream-offset' for queue '%s' in vhost '%s'", s.q.Name, s.q.vhost.Name)
	}
	switch v := v.(type) {
	case string:
		switch v {
		case "first":
			return l.First(), 0, nil
		case "last":
			p, err := l.Last()
			return p, 0, err
		case "next":
			return l.End(), 0, nil
		}
		d := parseMaxAge(v)
		if d == 0 {
			return streamlog.Position{}, 0, bad()
		}
		p, err := l.AtTimestamp(s.q.vhost.b.clock.Now().Add(-d).UnixMilli())
		return p, 0, err
	case time.Time:
		p, err := l.AtTimestamp(v.UnixMilli())
		return p, 0, err
	case bool, float32, float64, amqp.Decimal:
		return streamlog.Position{}, 0, bad()
	}
	n, ok := IntArg(v)
	if !ok {
		return streamlog.Position{}, 0, bad()
	}
	if n < 0 {
		n = 0
	}
	p, err := l.AtOffset(uint64(n))
	return p, uint64(n), err
}

func (s *streamState) filtersOf(args amqp.Table) (fs []string, unfiltered bool) {
	switch v := args["x-stream-filter"].(type) {
	case string:
		fs = []string{v}
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				fs = append(fs, s)
			}
		}
	}
	unfiltered, _ = args["x-stream-match-unfiltered"].(bool)
	return fs, unfiltered
}

func (s *streamState) unsupported(what string) error {
	return amqp.Errorf(amqp.NotImplemented, "%s not supported by stream queues queue '%s' in vhost '%s'", what, s.q.Name, s.q.vhost.Name)
}

// addConsumer checks and starts an AMQP 0-9-1 consumer, as
// rabbit_stream_queue:consume: manual acks and a prefetch are required.
func (s *streamState) addConsumer(c *Consumer, added func()) error {
	q := s.q
	if c.NoAck {
		return s.unsupported("automatic acknowledgement")
	}
	if c.Prefetch <= 0 {
		return amqp.Errorf(amqp.PreconditionFailed, "consumer prefetch count is not set for 'queue '%s' in vhost '%s''", q.Name, q.vhost.Name)
	}
	if !q.StreamHere() {
		// rabbit_stream_queue: a consumer reads a local member
		return amqp.Errorf(amqp.PreconditionFailed, "stream queue '%s' in vhost '%s' does not have a running replica on the local node", q.Name, q.vhost.Name)
	}
	pos, from, err := s.startAt(c.Args)
	if err != nil {
		return err
	}
	fs, unf := s.filtersOf(c.Args)
	sc := &streamConsumer{s: s, c: c, r: s.log.NewReader(pos), from: from, filters: fs, matchUnfiltered: unf,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if v, ok := c.Args["x-stream-offset"]; !ok || v == "next" {
		sc.offset.Store(s.log.Info().Next) // where it reads from, for its lag
	} else {
		sc.offset.Store(from)
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		sc.r.Close()
		return notFoundQueue(q.Name, q.vhost.Name)
	}
	q.nextCID++
	mc := &mconsumer{ID: q.nextCID, Ref: c, Priority: c.Priority, Exclusive: c.Exclusive}
	if err := q.m.AddConsumer(mc); err != nil {
		q.mu.Unlock()
		sc.r.Close()
		return amqp.Errorf(amqp.AccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.Name, q.vhost.Name)
	}
	c.Queue, c.m = q, mc
	if added != nil {
		added()
	}
	q.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(sc.done)
		sc.r.Close()
		return nil
	}
	s.cons[c] = sc
	s.mu.Unlock()
	go sc.run()
	return nil
}

func (s *streamState) removeConsumer(c *Consumer) {
	s.mu.Lock()
	sc := s.cons[c]
	delete(s.cons, c)
	s.mu.Unlock()
	if sc != nil {
		sc.stop()
	}
	q := s.q
	q.mu.Lock()
	if c.m != nil && c.Queue == q {
		q.m.RemoveConsumer(q.nowMs(), c.m)
	}
	q.mu.Unlock()
}

func (s *streamState) dispatch() {
	s.mu.Lock()
	for _, sc := range s.cons {
		sc.poke()
	}
	s.mu.Unlock()
}

// StreamConsumerInfo is a stream consumer's position, for the management
// API.
type StreamConsumerInfo struct {
	Tag    string
	Offset uint64 // the next offset it reads
}

// --- the queue-type seam ---

// streamType is a stream queue (on a single node; replication is a later
// step of issue 25).
type streamType struct{ q *Queue }

func (k streamType) s() *streamState { return k.q.sq }

func (k streamType) enqueue(m *Message, r *Router) enqueueResult { return k.s().enqueue(m, r) }
func (k streamType) get(bool) (Delivery, int, bool)              { return Delivery{}, 0, false }
func (k streamType) dispatch()                                   { k.s().dispatch() }

// settle: acks, nacks and rejects only return credit (the channel's
// count), which may let a consumer read on.
func (k streamType) settle([]Delivery, byte)                     { k.s().dispatch() }
func (k streamType) purge() int                                  { return 0 }
func (k streamType) addConsumer(c *Consumer, added func()) error { return k.s().addConsumer(c, added) }
func (k streamType) removeConsumer(c *Consumer)                  { k.s().removeConsumer(c) }
func (k streamType) counts() (messages, consumers int) {
	in := k.s().log.Info()
	k.q.mu.Lock()
	consumers = len(k.q.m.Consumers())
	k.q.mu.Unlock()
	if in.Chunks == 0 {
		return 0, consumers
	}
	return committedRecords(in), consumers
}
func (k streamType) browse(offset int, fn func(Browsed) bool) int { return k.s().browse(offset, fn) }
func (k streamType) here() bool                                   { return true }
func (k streamType) home() string                                 { return k.q.Home }
func (k streamType) takeDeadLetter(src *Queue, rd *remoteDL, name string) {
	k.enqueue(rd.msg, nil)
	src.remoteDLAnswer(rd, name, nil)
}
func (streamType) answersLater() bool { return false }
func (k streamType) replicas() (members []string, group uint64) {
	if r := k.s().repl; r != nil {
		return r.memberList(), r.group
	}
	return nil, 0
}
func (k streamType) started(fresh bool) {
	if r := k.s().repl; r != nil {
		r.start(fresh)
	}
}
func (streamType) available() error                           { return nil }
func (k streamType) callHome(req []byte) (*msgDecoder, error) { return nil, errRemoteNoQueue }
func (streamType) homeLost() error                            { return errRemoteNoQueue }
func (streamType) homeAnswer(err error) error                 { return err }
func (streamType) notHere() error                             { return nil }
func (streamType) deletable() error                           { return nil }
func (k streamType) declareCounts() (*Queue, int, int, error) {
	m, c := k.counts()
	return k.q, m, c, nil
}
func (k streamType) deleted()   { k.s().close(true) }
func (streamType) ownLog() bool { return true }

// statsLocked: a stream's messages are its log's records (all ready, as
// RabbitMQ counts them), all persistent; published and delivered are its
// own counters.
func (k streamType) statsLocked(s *QueueStats) {
	st := k.s()
	in := st.log.Info()
	if in.Chunks > 0 {
		s.Ready = committedRecords(in)
	}
	s.ReadyBytes = in.Bytes
	s.Persistent, s.PersistentBytes = s.Ready, s.ReadyBytes
	s.Published = st.published.Load()
	s.Deliver = st.delivered.Load()
}
func (streamType) legCanceled(*rconsumer) bool                 { return false }
func (streamType) legHomeDown(*rconsumer, string) (bool, bool) { return true, false }
func (streamType) returnUnseen([]Delivery)                     {}
func (streamType) proxyGen() (uint64, bool)                    { return 0, false }
func (streamType) heldFailed() bool                            { return false }
func (streamType) countsCall([]byte, bool) (*msgDecoder, error) {
	return nil, errRemoteNoQueue
}
func (k streamType) closing() { k.s().close(false) }

// Unsupported reports whether q refuses operation op ("basic.get",
// "queue.purge"), with RabbitMQ's 540 for a stream; nil otherwise.
func (q *Queue) Unsupported(op string) error {
	if q.sq != nil {
		return q.sq.unsupported(op)
	}
	return nil
}

// StreamInfo is a stream's log as the management API shows it.
type StreamInfo struct {
	streamlog.Info
	Published, Delivered uint64
	Consumers            []StreamConsumerInfo
}

// StreamInfo returns q's stream numbers (false when q is not a stream).
func (q *Queue) StreamInfo() (StreamInfo, bool) {
	s := q.sq
	if s == nil {
		return StreamInfo{}, false
	}
	in := StreamInfo{Info: s.log.Info(), Published: s.published.Load(), Delivered: s.delivered.Load()}
	s.mu.Lock()
	for c, sc := range s.cons {
		in.Consumers = append(in.Consumers, StreamConsumerInfo{Tag: c.Tag, Offset: sc.offset.Load()})
	}
	s.mu.Unlock()
	return in, true
}

// --- the stream protocol's view (streamserver) ---

// Stream returns the stream name in v, or nil when there is no queue of
// that name or it is not a stream.
func (v *VHost) Stream(name string) *Queue {
	q := v.Queue(name)
	if q == nil || q.sq == nil {
		return nil
	}
	return q
}

// IsStream reports whether q is a stream.
func (q *Queue) IsStream() bool { return q.sq != nil }

// StreamPublish queues a stream-protocol publish on stream q; false when
// the stream is gone (op.Done is not called then).
func (q *Queue) StreamPublish(op *StreamPublish) bool { return q.sq.publishOp(op) }

// StreamStoreOffset stores consumer reference ref's offset (a tracking
// chunk); false when the stream is gone.
func (q *Queue) StreamStoreOffset(ref string, offset uint64) bool {
	return q.sq.queue(streamPub{store: &streamStore{ref: ref, offset: offset}})
}

// StreamOffset is the offset stored for consumer reference ref (the
// leader's answer in a cluster).
func (q *Queue) StreamOffset(ref string) (uint64, bool) { return q.sq.query(streamQueryOffset, ref) }

// StreamWriterSeq is the last publishing id written for publisher
// reference ref (the leader's answer in a cluster).
func (q *Queue) StreamWriterSeq(ref string) (uint64, bool) { return q.sq.query(streamQuerySeq, ref) }

// StreamGone is closed when stream q is deleted or the broker closes.
func (q *Queue) StreamGone() <-chan struct{} { return q.sq.gone }

// StreamLog is stream q's log, for readers (streamserver).
func (q *Queue) StreamLog() *streamlog.Log { return q.sq.log }

// Stream offset specifications (the stream protocol's numbers).
const (
	OffsetFirst     = 1
	OffsetLast      = 2
	OffsetNext      = 3
	OffsetAbsolute  = 4
	OffsetTimestamp = 5
)

// StreamPosition is where a reader of stream q starts for an offset
// specification (kind, value): the chunk that holds the offset, the
// first chunk at or after the timestamp (ms), first, last or next.
func (q *Queue) StreamPosition(kind uint16, value int64) (streamlog.Position, error) {
	l := q.sq.log
	switch kind {
	case OffsetFirst:
		return l.First(), nil
	case OffsetLast:
		return l.Last()
	case OffsetNext:
		return l.End(), nil
	case OffsetAbsolute:
		return l.AtOffset(uint64(max(value, 0)))
	case OffsetTimestamp:
		return l.AtTimestamp(value)
	}
	return streamlog.Position{}, fmt.Errorf("unknown offset specification %d", kind)
}

// browse reads the stream's messages from the offset-th record of its
// first chunk on, without consuming anything (a stream keeps them): the
// dead-letter page and warren dlq inspect read a stream DLQ this way.
//
// The total is the committed records once the reading is done: the
// reader shows committed chunks only, and a chunk committed while it
// read must be counted with it (the total is never below what it showed).
func (s *streamState) browse(offset int, fn func(Browsed) bool) (total int) {
	in := s.log.Info()
	if in.Chunks == 0 {
		return 0
	}
	defer func() { total = committedRecords(s.log.Info()) }()
	from := in.FirstOffset + uint64(offset)
	pos, err := s.log.AtOffset(from)
	if err != nil {
		return 0
	}
	r := s.log.NewReader(pos)
	defer r.Close()
	for {
		c, err := r.Next()
		if err != nil {
			return 0
		}
		if c.Type != streamlog.ChunkUser {
			continue
		}
		if eachRecord(c, func(o uint64, rec []byte) bool {
			if o < from {
				return true
			}
			m, err := streamDecode(rec, s.q.Name)
			return err != nil || fn(Browsed{Msg: m})
		}) {
			return 0
		}
	}
}

// replayStream replays a stream's dead letters from o.From or o.Since up
// to what the stream held when it began (what dies back into it while
// it runs is not replayed again), each as ReplayMessage says, checked as
// a client's publish; the stream keeps every record.
func (b *Broker) replayStream(ctx context.Context, act Actor, v *VHost, q *Queue, o ReplayOptions) (res MoveResult) {
	l := q.sq.log
	in := l.Info()
	end := in.Committed
	from := in.FirstOffset
	var pos streamlog.Position
	var err error
	switch {
	case o.From != nil:
		from = max(*o.From, in.FirstOffset)
		pos, err = l.AtOffset(from)
	case !o.Since.IsZero():
		pos, err = l.AtTimestamp(o.Since.UnixMilli())
		from = 0
	default:
		pos = l.First()
	}
	res.Next = max(from, in.FirstOffset)
	if err != nil {
		res.Err = err
		return res
	}
	r := l.NewReader(pos)
	defer r.Close()
	var rt Router
	var waits Durability
	defer func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := b.WaitDurable(wctx, waits); err != nil && res.Err == nil {
			res.Err = err
		}
	}()
	for o.Limit == 0 || res.Moved < o.Limit {
		if ctx.Err() != nil {
			res.Err = ctx.Err()
			return res
		}
		c, err := r.Next()
		if err != nil {
			return res // the end (or the stream closed)
		}
		if c.ID >= end {
			return res
		}
		if c.Type != streamlog.ChunkUser {
			continue
		}
		eachRecord(c, func(at uint64, rec []byte) bool {
			if at < from || at >= end {
				return true
			}
			if o.Limit > 0 && res.Moved >= o.Limit {
				return false
			}
			res.Next = at + 1
			m, err := streamDecode(rec, q.Name)
			if err != nil || !o.Filter.Match(m) {
				res.Skipped++
				return true
			}
			exchange, out, ok := ReplayMessage(m, o.KeepHistory)
			if !ok {
				res.Skipped++
				return true
			}
			dur, err := b.republish(act, v, &rt, exchange, out)
			if err != nil {
				res.Err, res.Next = err, at
				res.Failed++
				return false
			}
			waits.Add(dur)
			res.Moved++
			return true
		})
		if res.Err != nil {
			return res
		}
	}
	return res
}
