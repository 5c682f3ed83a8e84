package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/broker/machine"
	"github.com/warrenmq/warren/store"
)

// MsgStore keeps the persistent messages (delivery-mode 2) of durable
// queues, one store.Log per queue incarnation in dir/<id>/ with a meta file
// naming the queue (docs/storage.md). A queue appends to its log under its
// own lock; one store.Syncer group-commits the fsyncs that publisher
// confirms and dead-letter moves wait for.
//
// Records (msgcodec.go): M a message enqueued; A acks (a message left the
// queue: acked, expired, dropped, dead-lettered); R a message returned
// (its counts, R5.3); P a purge; X the intent to dead-letter a message to
// target queues; D a dead letter moved in, naming its source.
//
// A dead-letter move of a persistent message between durable queues is
// atomic across crashes: X is made durable in the source, then D in every
// target, then the copy becomes visible in the targets and A is appended to
// the source. Recovery completes a move whose X has no A: if any target
// has the D, the others get it too and the source acks; if none has, the
// message stays in the source. Before a segment is removed, every log is
// synced, so an A that a removal depends on is never lost.
type MsgStore struct {
	dir    string
	log    *slog.Logger
	syncer *store.Syncer
	opts   store.Options
	// clean: the previous run shut down cleanly, so the redelivered flags
	// on disk are exact; after a crash every recovered message is marked
	// redelivered (it may have been delivered).
	clean bool

	// reads and writes count the message records read back (paged in,
	// browsed) and written, for the management API's disk_reads and
	// disk_writes.
	reads, writes atomic.Uint64

	mu     sync.Mutex
	open   map[uint64]*qdisk
	found  map[string][]foundDir // by vhost + "\x00" + queue, until recovery claims them
	lastID uint64
	closed bool

	reclaimWake chan struct{}
	reclaimSet  map[*qdisk]bool // guarded by mu
	done        chan struct{}
	wg          sync.WaitGroup
	dlFlushers  dlFlushers // dead-letter flushers, drained by Close (dlflush.go)
}

type foundDir struct {
	id   uint64
	path string
}

type qmeta struct {
	VHost    string `json:"vhost"`
	Queue    string `json:"queue,omitempty"`
	Exchange string `json:"exchange,omitempty"` // a delayed exchange's held messages
	ID       uint64 `json:"id"`
	Paging   bool   `json:"paging,omitempty"`
}

const cleanMarker = "clean-shutdown"

// MsgStoreOptions configure a MsgStore; the zero value is usable.
type MsgStoreOptions struct {
	Logger *slog.Logger
	// FS is the file system of the queue logs' segment files (default
	// store.OSFS); tests inject faults through it. Directories and meta
	// files are always on the real file system.
	FS store.FS
	// RetryInterval is how often a failed queue log tries to write again
	// (store.Options.RetryInterval; 0: store.DefaultRetryInterval).
	RetryInterval time.Duration
	// MaxOpenFiles bounds the segment files open at once across all queue
	// logs (store.FilePool), so that descriptors do not grow with the
	// number of queues; files are reopened on demand. 0 means
	// store.DefaultMaxOpenFiles (a quarter of RLIMIT_NOFILE, at most 512);
	// a negative value keeps every segment file open (no bound).
	MaxOpenFiles int
}

// OpenMsgStore opens (creating it if needed) the message store in dir. It
// reads which queue logs exist; Broker.Recover loads them.
func OpenMsgStore(dir string, logger *slog.Logger) (*MsgStore, error) {
	return OpenMsgStoreWith(dir, MsgStoreOptions{Logger: logger})
}

// OpenMsgStoreWith is OpenMsgStore with options.
func OpenMsgStoreWith(dir string, o MsgStoreOptions) (*MsgStore, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ms := &MsgStore{dir: dir, log: logger, open: map[uint64]*qdisk{}, found: map[string][]foundDir{},
		reclaimWake: make(chan struct{}, 1), reclaimSet: map[*qdisk]bool{}, done: make(chan struct{})}
	ms.opts = store.Options{Logger: logger, FS: o.FS, RetryInterval: o.RetryInterval}
	switch {
	case o.MaxOpenFiles == 0:
		ms.opts.Files = store.NewFilePool(store.DefaultMaxOpenFiles())
	case o.MaxOpenFiles > 0:
		ms.opts.Files = store.NewFilePool(o.MaxOpenFiles)
	}
	if _, err := os.Stat(filepath.Join(dir, cleanMarker)); err == nil {
		ms.clean = true
		if err := os.Remove(filepath.Join(dir, cleanMarker)); err != nil {
			return nil, err
		}
		if err := (store.OSFS{}).SyncDir(dir); err != nil {
			return nil, err
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(p, "meta"))
		var m qmeta
		if err == nil {
			err = decodeRecord(b, &m, false) // names byte for byte (persist.go)
		}
		if err != nil || m.ID == 0 || strconv.FormatUint(m.ID, 16) != e.Name() {
			// Created, but the crash came before its meta was written: it
			// holds no message (meta is written before the first append).
			logger.Warn("message store: removing a queue directory without valid meta", "dir", p, "err", err)
			os.RemoveAll(p)
			continue
		}
		if m.Paging {
			os.RemoveAll(p) // a transient queue's paged messages end with the run
			continue
		}
		k := scopedKey(m.VHost, m.Queue)
		if m.Exchange != "" {
			k = delayedKey(m.VHost, m.Exchange)
		}
		ms.found[k] = append(ms.found[k], foundDir{id: m.ID, path: p})
		ms.lastID = max(ms.lastID, m.ID)
	}
	ms.syncer = store.NewSyncer(0)
	ms.wg.Add(1)
	go ms.reclaimer()
	return ms, nil
}

// Close syncs and closes every queue log. With clean, which the caller
// passes once no connection is left (their unacked messages have been
// returned), the shutdown is marked clean: the next start trusts the
// redelivered flags on disk. A nil store does nothing.
func (ms *MsgStore) Close(clean bool) error {
	if ms == nil {
		return nil
	}
	ms.dlFlushers.wait() // dead letters on their way are published first
	ms.mu.Lock()
	if ms.closed {
		ms.mu.Unlock()
		return nil
	}
	ms.closed = true
	ms.mu.Unlock()
	ms.syncer.Close() // runs the callbacks still pending
	close(ms.done)
	ms.wg.Wait()
	ms.mu.Lock()
	ds := ms.open
	ms.open = map[uint64]*qdisk{}
	ms.mu.Unlock()
	var first error
	for _, d := range ds {
		d.lock.Lock()
		d.flushPendingAcks() // acks a full disk refused
		d.closed = true
		d.lock.Unlock()
		if err := d.log.Close(); err != nil && first == nil {
			first = err
		}
	}
	if first != nil || !clean {
		return first
	}
	if err := writeSynced(filepath.Join(ms.dir, cleanMarker), nil); err != nil {
		return err
	}
	return store.OSFS{}.SyncDir(ms.dir)
}

// writeSynced writes a file and fsyncs it (not its directory).
func writeSynced(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// FileStats returns the counters of the bound on open segment files (zero
// without one).
func (ms *MsgStore) FileStats() store.FilePoolStats {
	if ms == nil || ms.opts.Files == nil {
		return store.FilePoolStats{}
	}
	return ms.opts.Files.Stats()
}

// Syncer returns the store's group-commit syncer.
func (ms *MsgStore) Syncer() *store.Syncer { return ms.syncer }

// newID returns a queue incarnation id, increasing across restarts.
func (ms *MsgStore) newID() uint64 {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	id := max(uint64(time.Now().UnixNano()), ms.lastID+1)
	ms.lastID = id
	return id
}

// syncAll makes every record appended so far to any log durable.
func (ms *MsgStore) syncAll() {
	ms.mu.Lock()
	logs := make([]*store.Log, 0, len(ms.open))
	for _, d := range ms.open {
		if !d.paging {
			logs = append(logs, d.log)
		}
	}
	ms.mu.Unlock()
	for _, l := range logs {
		l.Sync() // a failed log reports itself on its next append
	}
}

// reclaimer removes the segments of queue logs that hold no live message.
func (ms *MsgStore) reclaimer() {
	defer ms.wg.Done()
	for {
		select {
		case <-ms.done:
			return
		case <-ms.reclaimWake:
			ms.mu.Lock()
			set := ms.reclaimSet
			ms.reclaimSet = map[*qdisk]bool{}
			ms.mu.Unlock()
			for d := range set {
				ms.reclaim(d)
			}
		}
	}
}

// reclaimThreshold is how large the active segment of a queue with no
// live message may grow before it is rolled so that it can be removed.
const reclaimThreshold = 4 << 20

func (ms *MsgStore) reclaim(d *qdisk) {
	d.lock.Lock()
	if d.log == nil || d.closed {
		d.lock.Unlock()
		return
	}
	before := uint32(math.MaxUint32)
	if len(d.live) > 0 {
		before = d.live[0].seg
	}
	segs := d.log.Segments()
	if before == math.MaxUint32 {
		if d.log.Size() > reclaimThreshold {
			if err := d.log.Roll(); err != nil {
				d.lock.Unlock()
				return
			}
			segs = d.log.Segments()
		}
		before = segs[len(segs)-1]
	}
	d.lock.Unlock()
	if len(segs) < 2 || segs[0] >= before {
		return
	}
	// An A in another log that a removed D depends on must be durable
	// first (see MsgStore).
	ms.syncAll()
	if err := d.log.RemoveSegmentsBefore(before); err != nil && !errors.Is(err, store.ErrClosed) {
		ms.log.Error("message store: removing acked segments", "dir", d.dir, "err", err)
	}
}

// qdisk is a queue's log. Fields other than log and id are guarded by the
// queue's lock; the log is opened on the first append.
type qdisk struct {
	ms *MsgStore
	q  *Queue // nil for a delayed exchange's log
	// vhost and name name the owner; exchange is set for a delayed
	// exchange's log. lock is the owner's lock, which guards the fields
	// below but log and id.
	vhost, name string
	exchange    bool
	lock        sync.Locker
	id          uint64
	dir         string
	log         *store.Log
	err         error     // the log could not be created (retried after errAt + the retry interval)
	errAt       time.Time // of err
	failing     bool      // the last append failed (a full disk); the log repairs itself
	// pendingAcks are messages that left the queue while the log refused
	// writes: their A record is appended once it takes writes again, so
	// that they do not come back after a restart.
	pendingAcks []uint64
	closed      bool
	paging      bool // a transient queue's paging log, deleted at start-up
	// dirtyUpTo: after a crash, records up to here were recovered and their
	// messages may have been delivered: they come back redelivered.
	dirtyUpTo store.Pos
	buf       []byte
	// live counts the messages still in the queue (ready, unacked or
	// being moved) by segment, oldest first.
	live segCounts
}

type segCount struct {
	seg uint32
	n   int
}

func (ms *MsgStore) newDisk(q *Queue, id uint64, dir string) *qdisk {
	if id == 0 {
		id = ms.newID()
		dir = filepath.Join(ms.dir, strconv.FormatUint(id, 16))
	}
	return &qdisk{ms: ms, q: q, vhost: q.vhost.Name, name: q.Name, lock: (*diskLock)(q), id: id, dir: dir}
}

// newXDisk is newDisk for the held messages of a delayed exchange.
func (ms *MsgStore) newXDisk(x *Exchange, id uint64, dir string) *qdisk {
	if id == 0 {
		id = ms.newID()
		dir = filepath.Join(ms.dir, strconv.FormatUint(id, 16))
	}
	return &qdisk{ms: ms, vhost: x.vhost.Name, name: x.Name, exchange: true, lock: &x.delayed.mu, id: id, dir: dir}
}

// ensure opens the log, creating its directory and meta file first. If that
// fails (a full disk), it tries again after the retry interval.
func (d *qdisk) ensure() error {
	if d.log != nil {
		return nil
	}
	if d.closed {
		return store.ErrClosed
	}
	if d.err != nil && time.Since(d.errAt) < d.ms.retryInterval() {
		return d.err
	}
	if err := d.create(); err != nil {
		if d.err == nil {
			d.ms.log.Error("message store: cannot create queue log; persistent messages to it are refused (nacked) until it can",
				"owner", d.name, "vhost", d.vhost, "err", err)
		}
		d.err, d.errAt = err, time.Now()
		return err
	}
	if d.err != nil {
		d.ms.log.Warn("message store: queue log created", "owner", d.name, "vhost", d.vhost)
		d.err = nil
	}
	return nil
}

func (ms *MsgStore) retryInterval() time.Duration {
	if ms.opts.RetryInterval > 0 {
		return ms.opts.RetryInterval
	}
	if ms.opts.RetryInterval < 0 {
		return 0
	}
	return store.DefaultRetryInterval
}

func (d *qdisk) create() error {
	if _, err := os.Stat(filepath.Join(d.dir, "meta")); err != nil {
		if err := os.MkdirAll(d.dir, 0o755); err != nil {
			return err
		}
		meta := qmeta{VHost: d.vhost, Queue: d.name, ID: d.id, Paging: d.paging}
		if d.exchange {
			meta = qmeta{VHost: d.vhost, Exchange: d.name, ID: d.id}
		}
		b, err := encodeRecord(meta) // names byte for byte (persist.go)
		if err != nil {
			return err
		}
		tmp := filepath.Join(d.dir, "meta.tmp")
		if err := writeSynced(tmp, b); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(d.dir, "meta")); err != nil {
			return err
		}
		if err := (store.OSFS{}).SyncDir(d.dir); err != nil {
			return err
		}
		if err := (store.OSFS{}).SyncDir(d.ms.dir); err != nil {
			return err
		}
	}
	opts := d.ms.opts
	opts.NoSync = d.paging // paged transient messages need not survive a crash
	l, err := store.OpenLog(d.dir, opts)
	if err != nil {
		return err
	}
	d.ms.mu.Lock()
	if d.ms.closed {
		d.ms.mu.Unlock()
		l.Close()
		return store.ErrClosed
	}
	d.ms.open[d.id] = d
	d.ms.mu.Unlock()
	d.log = l
	return nil
}

// append writes a record. While the log fails (a full disk), the error is
// returned and the owner keeps the message in memory only (a publisher
// waiting for a confirm gets a nack); the log repairs itself once writes
// succeed again (store.Log.Sync), and appends continue.
func (d *qdisk) append(typ byte, payload []byte) (store.Pos, error) {
	if d.closed {
		return store.Pos{}, store.ErrClosed
	}
	if err := d.ensure(); err != nil {
		return store.Pos{}, err
	}
	if err := d.flushPendingAcks(); err != nil {
		return store.Pos{}, err
	}
	p, err := d.log.Append(typ, payload)
	if err != nil {
		return p, d.appendFailed(err)
	}
	d.appendWorked()
	return p, nil
}

// appendFailed reports the first failure of a series and returns err.
func (d *qdisk) appendFailed(err error) error {
	if !d.failing && !errors.Is(err, store.ErrClosed) {
		d.failing = true
		d.ms.log.Error("message store: queue log failed; persistent messages to it are refused (nacked) until its writes succeed again",
			"owner", d.name, "vhost", d.vhost, "err", err)
	}
	return err
}

func (d *qdisk) appendWorked() {
	if d.failing {
		d.failing = false
		d.ms.log.Warn("message store: queue log writes again", "owner", d.name, "vhost", d.vhost)
	}
}

// flushPendingAcks appends the acks a failing log refused.
func (d *qdisk) flushPendingAcks() error {
	if len(d.pendingAcks) == 0 || d.log == nil {
		return nil
	}
	b := make([]byte, 0, 8*len(d.pendingAcks))
	for _, s := range d.pendingAcks {
		b = binary.LittleEndian.AppendUint64(b, s)
	}
	if _, err := d.log.Append(recAck, b); err != nil {
		return d.appendFailed(err)
	}
	d.pendingAcks = nil
	return nil
}

// DiskIO returns how many message records were read back and written.
func (ms *MsgStore) DiskIO() (reads, writes uint64) {
	if ms == nil {
		return 0, 0
	}
	return ms.reads.Load(), ms.writes.Load()
}

// appendMsg writes an M record (or a D record with prefix) and counts the
// message live in its segment.

func (d *qdisk) appendMsg(typ byte, prefix []byte, h msgHeader, m *Message) (store.Pos, error) {
	d.ms.writes.Add(1)
	b := append(d.buf[:0], prefix...)
	h.bodyLen, h.persistent = uint32(len(m.Body)), m.persistent()
	if d.q != nil && !d.paging {
		h.persistent = d.q.keeps(m) // recovered after a restart
	}
	b = appendMsgHeader(b, h)
	b = appendMessage(b, m)
	p, err := d.append(typ, b)
	if cap(b) <= 1<<20 {
		d.buf = b[:0]
	}
	if err == nil {
		d.addLive(p.Seg)
	}
	return p, err
}

func (d *qdisk) addLive(seg uint32) { d.live.add(seg, 1) }

// dropLive counts n messages of segment seg gone; when the oldest live
// segment empties, the reclaimer is told.
func (d *qdisk) dropLive(seg uint32, n int) {
	if !d.live.sub(seg, n) {
		return
	}
	d.ms.mu.Lock()
	d.ms.reclaimSet[d] = true
	d.ms.mu.Unlock()
	select {
	case d.ms.reclaimWake <- struct{}{}:
	default:
	}
}

// segCounts counts messages by log segment, oldest segment first, with
// no empty entry.
type segCounts []segCount

func (c *segCounts) add(seg uint32, n int) {
	cs := *c
	if k := len(cs); k > 0 && cs[k-1].seg == seg {
		cs[k-1].n += n
		return
	}
	i := sort.Search(len(cs), func(i int) bool { return cs[i].seg >= seg })
	if i < len(cs) && cs[i].seg == seg {
		cs[i].n += n
		return
	}
	cs = append(cs, segCount{})
	copy(cs[i+1:], cs[i:])
	cs[i] = segCount{seg: seg, n: n}
	*c = cs
}

// sub takes n from segment seg and reports whether that emptied the
// oldest segment.
func (c *segCounts) sub(seg uint32, n int) (oldestEmptied bool) {
	cs := *c
	i := sort.Search(len(cs), func(i int) bool { return cs[i].seg >= seg })
	if i == len(cs) || cs[i].seg != seg {
		return false
	}
	if cs[i].n -= n; cs[i].n > 0 {
		return false
	}
	*c = append(cs[:i], cs[i+1:]...)
	return i == 0
}

// ack appends an A record for the given entries and drops them from the
// live counts.
func (d *qdisk) ack(seqs []uint64, segs []uint32) {
	if len(seqs) == 0 {
		return
	}
	b := d.buf[:0]
	for _, s := range seqs {
		b = binary.LittleEndian.AppendUint64(b, s)
	}
	if _, err := d.append(recAck, b); err != nil && !errors.Is(err, store.ErrClosed) && !d.paging {
		d.pendingAcks = append(d.pendingAcks, seqs...)
	}
	d.buf = b[:0]
	for _, s := range segs {
		d.dropLive(s, 1)
	}
}

func (d *qdisk) ack1(seq uint64, seg uint32) {
	var s [1]uint64
	var g [1]uint32
	s[0], g[0] = seq, seg
	d.ack(s[:], g[:])
}

// requeue appends an R record: seq returned (as newSeq) with its counts and
// the time its retry delay ends (0: ready now).
func (d *qdisk) requeue(seq, newSeq uint64, dc, acq uint32, delayUntil int64) {
	b := d.buf[:0]
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = binary.LittleEndian.AppendUint64(b, newSeq)
	b = binary.LittleEndian.AppendUint32(b, dc)
	b = binary.LittleEndian.AppendUint32(b, acq)
	b = binary.LittleEndian.AppendUint64(b, uint64(delayUntil))
	d.append(recRequeue, b)
	d.buf = b[:0]
}

// purge appends a P record: every message recorded from position from up
// to the P record itself is gone, except the seqs in except.
func (d *qdisk) purge(from uint64, except []uint64) {
	b := binary.LittleEndian.AppendUint64(d.buf[:0], from)
	for _, s := range except {
		b = binary.LittleEndian.AppendUint64(b, s)
	}
	d.append(recPurge, b)
	d.buf = b[:0]
}

// close closes the log and, if remove, deletes the queue's directory (the
// queue was deleted).
func (d *qdisk) close(remove bool) {
	d.closed = true
	d.ms.mu.Lock()
	delete(d.ms.open, d.id)
	d.ms.mu.Unlock()
	if d.log != nil {
		d.log.Close()
	}
	if remove {
		if err := os.RemoveAll(d.dir); err != nil {
			d.ms.log.Error("message store: removing a deleted queue's log", "dir", d.dir, "err", err)
		}
		store.OSFS{}.SyncDir(d.ms.dir)
	}
}

// --- recovery ---

// recState is what the first pass over a queue's log learns.
type recState struct {
	q        *Queue
	d        *qdisk
	acked    seqSet
	renames  map[uint64]uint64
	requeues map[uint64]reqInfo
	purges   []purgeRec
	moves    map[uint64][]uint64 // X without A: seq -> target queue ids
	remote   []store.Pos         // Y records (dlremote.go)
	maxSeq   uint64
}

type reqInfo struct {
	dc, acq    uint32
	delayUntil int64
}

type purgeRec struct {
	from, to store.Pos
	except   map[uint64]bool
}

func (st *recState) current(seq uint64) uint64 {
	for i := 0; i < 64; i++ {
		n, ok := st.renames[seq]
		if !ok || n == seq {
			break
		}
		seq = n
	}
	return seq
}

func (st *recState) gone(seq uint64) bool {
	return st.acked.has(seq)
}

// purged reports whether the record at p (of seq) was removed by a purge.
func (st *recState) purged(p store.Pos, seq uint64) bool {
	for _, pr := range st.purges {
		if !p.Less(pr.from) && p.Less(pr.to) && !pr.except[seq] {
			return true
		}
	}
	return false
}

// recover loads the message logs of b's durable queues (called at the end
// of Broker.Recover, once every queue exists), completes interrupted
// dead-letter moves and removes the logs of queues that no longer exist.
func (ms *MsgStore) recover(b *Broker) error {
	start := time.Now()
	var states []*recState
	byID := map[uint64]*recState{}
	srcMax := map[uint64]uint64{}
	for _, vn := range b.VHosts() {
		v := b.VHost(vn)
		for _, q := range v.Queues() {
			if !q.persisted() || !q.typ().here() { // a remote queue's log is on its home
				continue
			}
			k := scopedKey(vn, q.Name)
			fds := ms.found[k]
			delete(ms.found, k)
			sort.Slice(fds, func(i, j int) bool { return fds[i].id > fds[j].id })
			for _, old := range fds[min(1, len(fds)):] {
				ms.log.Warn("message store: removing the log of an older incarnation of a queue", "queue", q.Name, "vhost", vn, "dir", old.path)
				os.RemoveAll(old.path)
			}
			if len(fds) == 0 {
				q.disk = ms.newDisk(q, 0, "")
				q.disk.ensure()
				continue
			}
			d := ms.newDisk(q, fds[0].id, fds[0].path)
			q.disk = d
			if err := d.create(); err != nil {
				return fmt.Errorf("message store: opening %s: %w", d.dir, err)
			}
			st := &recState{q: q, d: d, renames: map[uint64]uint64{}, requeues: map[uint64]reqInfo{}, moves: map[uint64][]uint64{}}
			if err := st.pass1(srcMax); err != nil {
				ms.log.Error("message store: queue log unreadable past a point; later records ignored", "queue", q.Name, "vhost", vn, "err", err)
			}
			states = append(states, st)
			byID[d.id] = st
		}
	}
	for _, vn := range b.VHosts() {
		for _, x := range b.VHost(vn).Exchanges() {
			if x.delayed != nil && x.persisted() {
				ms.recoverDelayed(x, b.clock.Now())
			}
		}
	}
	for k, fds := range ms.found {
		for _, fd := range fds {
			ms.log.Info("message store: removing the log of a queue that no longer exists", "queue", k, "dir", fd.path)
			os.RemoveAll(fd.path)
		}
	}
	ms.found = nil
	store.OSFS{}.SyncDir(ms.dir)
	for _, st := range states {
		st.maxSeq = max(st.maxSeq, srcMax[st.d.id])
	}
	moved := ms.completeMoves(states, byID)
	total := 0
	for _, st := range states {
		n, err := st.pass2(ms.clean, b.clock.Now().UnixMilli())
		if err != nil {
			ms.log.Error("message store: queue log unreadable past a point; later records ignored", "queue", st.q.Name, "vhost", st.q.vhost.Name, "err", err)
		}
		total += n
		st.recoverRemoteDLs()
	}
	ms.log.Info("messages recovered", "queues", len(states), "messages", total, "moves_completed", moved,
		"clean_shutdown", ms.clean, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func (st *recState) pass1(srcMax map[uint64]uint64) error {
	return st.d.log.Scan(func(p store.Pos, typ byte, pl []byte) error {
		switch typ {
		case recMessage, recMovedIn:
			if typ == recMovedIn {
				if len(pl) < 16 {
					return nil
				}
				src, sseq := le64(pl), le64(pl[8:])
				srcMax[src] = max(srcMax[src], sseq)
				pl = pl[16:]
			}
			if len(pl) < msgHeaderSize {
				return nil
			}
			st.maxSeq = max(st.maxSeq, le64(pl))
		case recAck:
			for ; len(pl) >= 8; pl = pl[8:] {
				s := le64(pl)
				st.acked.add(s)
				delete(st.moves, s)
			}
		case recRequeue:
			if len(pl) < 32 {
				return nil
			}
			seq, nseq := le64(pl), le64(pl[8:])
			if nseq != seq {
				st.renames[seq] = nseq
				st.maxSeq = max(st.maxSeq, nseq)
			}
			st.requeues[nseq] = reqInfo{dc: binary.LittleEndian.Uint32(pl[16:]), acq: binary.LittleEndian.Uint32(pl[20:]),
				delayUntil: int64(le64(pl[24:]))}
		case recPurge:
			if len(pl) < 8 {
				return nil
			}
			pr := purgeRec{from: store.PosFromUint64(le64(pl)), to: p, except: map[uint64]bool{}}
			for pl = pl[8:]; len(pl) >= 8; pl = pl[8:] {
				pr.except[le64(pl)] = true
			}
			st.purges = append(st.purges, pr)
		case recMovedOut:
			if len(pl) < 8 {
				return nil
			}
			seq := le64(pl)
			var ts []uint64
			for pl = pl[8:]; len(pl) >= 8; pl = pl[8:] {
				ts = append(ts, le64(pl))
			}
			st.moves[seq] = ts
		case recMovedRemote:
			if len(pl) < 8 {
				return nil
			}
			st.maxSeq = max(st.maxSeq, le64(pl))
			st.remote = append(st.remote, p)
		}
		return nil
	})
}

// completeMoves finishes the dead-letter moves that a crash interrupted
// (see MsgStore) and returns how many it completed.
func (ms *MsgStore) completeMoves(states []*recState, byID map[uint64]*recState) int {
	type key struct{ src, seq uint64 }
	type found struct {
		t   *recState
		pos store.Pos
	}
	want := map[*recState]map[key]bool{}
	for _, st := range states {
		for seq, ts := range st.moves {
			if st.gone(st.current(seq)) {
				continue
			}
			for _, tid := range ts {
				if t := byID[tid]; t != nil {
					if want[t] == nil {
						want[t] = map[key]bool{}
					}
					want[t][key{st.d.id, seq}] = true
				}
			}
		}
	}
	if len(want) == 0 {
		return 0
	}
	has := map[key][]found{}
	for t, ks := range want {
		t.d.log.Scan(func(p store.Pos, typ byte, pl []byte) error {
			if typ == recMovedIn && len(pl) >= 16 {
				if k := (key{le64(pl), le64(pl[8:])}); ks[k] {
					has[k] = append(has[k], found{t, p})
				}
			}
			return nil
		})
	}
	n := 0
	for _, st := range states {
		for seq, ts := range st.moves {
			k := key{st.d.id, seq}
			fs := has[k]
			if len(fs) == 0 || st.gone(st.current(seq)) {
				continue // never left the source: it stays there
			}
			_, pl, err := fs[0].t.d.log.ReadAt(fs[0].pos)
			if err != nil || len(pl) < 16+msgHeaderSize {
				continue
			}
			for _, tid := range ts {
				t := byID[tid]
				if t == nil || slices.ContainsFunc(fs, func(f found) bool { return f.t == t }) {
					continue
				}
				t.maxSeq++
				cp := append([]byte(nil), pl...)
				binary.LittleEndian.PutUint64(cp[16:], t.maxSeq)
				if _, err := t.d.log.Append(recMovedIn, cp); err != nil {
					ms.log.Error("message store: completing a dead-letter move", "queue", t.q.Name, "err", err)
				}
				t.d.log.Sync()
			}
			var a [8]byte
			binary.LittleEndian.PutUint64(a[:], st.current(seq))
			st.d.log.Append(recAck, a[:])
			st.d.log.Sync()
			st.acked.add(st.current(seq))
			n++
		}
	}
	return n
}

// pass2 loads the live messages into the queue, in order, and returns how
// many.
func (st *recState) pass2(clean bool, now int64) (int, error) {
	q, d := st.q, st.d
	canSpill := q.m.Levels() == 1
	wm, wb := q.vhost.b.window()
	var rec restored
	var memBytes int64
	var sp spillState
	var last store.Pos
	n := 0
	err := d.log.Scan(func(p store.Pos, typ byte, pl []byte) error {
		last = p
		h, rest, ok := msgRecord(typ, pl)
		if !ok {
			return nil
		}
		seq := st.current(h.seq)
		// Once spilling, every record the loader must not read back is
		// in the skip set: transient messages (paged out, they end with
		// the run), removed ones, and those kept in memory.
		if !h.persistent || st.gone(seq) || st.purged(p, seq) {
			if sp.active {
				sp.skip.add(h.seq)
			}
			return nil
		}
		d.addLive(p.Seg)
		n++
		r, requeued := st.requeues[seq]
		inMemory := seq != h.seq || requeued && r.delayUntil > now
		if inMemory && sp.active {
			sp.skip.add(h.seq)
		}
		if !inMemory && canSpill && (sp.active || len(rec.ready) >= wm || memBytes >= wb) {
			if !sp.active {
				sp.active, sp.cursor = true, p
			}
			rec.paged.All.N++
			rec.paged.All.Bytes += int64(h.bodyLen)
			if h.persistent {
				rec.paged.Persistent.N++
				rec.paged.Persistent.Bytes += int64(h.bodyLen)
			}
			sp.segs.add(p.Seg, 1)
			if requeued {
				if sp.counts == nil {
					sp.counts = map[uint64]reqInfo{}
				}
				sp.counts[seq] = r
			}
			if h.expiresAt != 0 {
				rec.pagedDeadlines = append(rec.pagedDeadlines, machine.Timed{At: h.expiresAt, Seq: seq, Pos: p.Uint64()})
			}
			return nil
		}
		m, err := decodeMessage(rest)
		if err != nil {
			q.vhost.b.log.Error("message store: undecodable message skipped", "queue", q.Name, "pos", p.String(), "err", err)
			return nil
		}
		e := qentry{Seq: seq, Msg: m, ExpiresAt: h.expiresAt, DeliveryCount: h.deliveryCount, Acquired: h.acquired,
			Redelivered: h.redelivered || !clean, OnDisk: true, Seg: p.Seg,
			Size: uint32(m.Size()), Persistent: m.persistent(), Level: m.Props.Priority}
		if requeued {
			e.DeliveryCount, e.Acquired, e.Redelivered = r.dc, r.acq, true
			if r.delayUntil > now {
				rec.delayed = append(rec.delayed, e)
				rec.delays = append(rec.delays, r.delayUntil)
				return nil
			}
		}
		rec.ready = append(rec.ready, e)
		memBytes += int64(m.Size())
		return nil
	})
	sort.SliceStable(rec.ready, func(i, j int) bool { return rec.ready[i].Seq < rec.ready[j].Seq })
	rec.spill, rec.lastSeq = sp, st.maxSeq
	if !clean {
		rec.dirtyUpTo = last
	}
	q.restore(&rec)
	return n, err
}

// purgeDiskLocked records that every ready and delayed message leaves the
// queue (Purge). q.mu held.
func (q *Queue) purgeDiskLocked() {
	if q.disk == nil {
		return
	}
	seqs, segs := q.ackSeqs[:0], q.ackSegs[:0]
	flush := func() {
		q.disk.ack(seqs, segs)
		seqs, segs = seqs[:0], segs[:0]
	}
	add := func(e *qentry) {
		if e.OnDisk {
			seqs, segs = append(seqs, e.Seq), append(segs, e.Seg)
			if len(seqs) == 8192 {
				flush()
			}
		}
	}
	q.m.EachQueued(add)
	flush()
	q.ackSeqs, q.ackSegs = seqs[:0], segs[:0]
}
