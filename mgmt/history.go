package mgmt

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/warrenmq/warren/mgmt/api"
)

// Rate and depth history (issue 15): the sampler keeps, per object, the
// values of its counters and lengths at every tick for the retention
// (default 10 minutes at 5 s, RabbitMQ's basic policy), and a request
// with msg_rates_age/msg_rates_incr (and lengths_, data_rates_,
// node_stats_) gets each <stat>_details with samples, avg_rate and avg,
// as RabbitMQ's management API.
//
// The store is compact: the tick times are kept once for all objects (a
// ring), and each object keeps its values at the oldest retained tick
// (base), its current values (cur) and a byte log of the ticks at which
// something changed: per change, the ticks since the previous change, a
// bit mask of the fields that changed and their deltas, all varints. An
// idle object costs its two value arrays and nothing per tick; a busy one
// a few bytes per field that changed per tick. Changes older than the
// retention fold into base.

// A history family is one of RabbitMQ's range parameter prefixes.
type histFamily int

const (
	famLengths histFamily = iota
	famMsgRates
	famDataRates
	famNodeStats
	numFamilies
)

// famPrefix is each family's query parameter prefix, in the order
// RabbitMQ parses them (the first invalid one is the one reported).
var famPrefix = [numFamilies]string{"lengths", "msg_rates", "data_rates", "node_stats"}

// histKind is a kind of object and the fields the sampler keeps for it,
// each with the range family RabbitMQ serves it under.
type histKind struct {
	fields []string
	family []histFamily
	index  map[string]int
}

func newKind(groups ...any) *histKind {
	k := &histKind{index: map[string]int{}}
	var fam histFamily
	for _, g := range groups {
		switch g := g.(type) {
		case histFamily:
			fam = g
		case string:
			k.index[g] = len(k.fields)
			k.fields = append(k.fields, g)
			k.family = append(k.family, fam)
		}
	}
	if len(k.fields) > 63 {
		panic("history kind with more than 63 fields")
	}
	return k
}

var (
	// kindQueue: a queue's message_stats (msg_rates) and lengths; Warren
	// adds dead_lettered, the messages it dead-lettered (all reasons).
	kindQueue = newKind(famMsgRates, "publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
		"deliver_get", "ack", "redeliver", "dead_lettered",
		famLengths, "messages", "messages_ready", "messages_unacknowledged")
	kindExchange = newKind(famMsgRates, "publish_in", "publish_out")
	// channelStatFields are a channel's message_stats, as RabbitMQ's.
	channelStatFields = []string{"publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
		"deliver_no_ack", "get", "get_no_ack", "get_empty", "deliver_get", "redeliver", "ack"}
	// kindChannel: its message_stats (channelStatFields), and the counts
	// that make it active for idle_since.
	kindChannel = newKind(famMsgRates, "publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
		"deliver_no_ack", "get", "get_no_ack", "get_empty", "deliver_get", "redeliver", "ack",
		"reject", "requeue", "unacked")
	kindConn = newKind(famDataRates, "recv_oct", "send_oct")
	// kindVHost: as RabbitMQ's vhost stats, message_stats and the
	// message counts both under msg_rates (its vhost_msg_stats take the
	// msg_rates range), recv_oct and send_oct under data_rates. Warren's
	// vhost message_stats are its queues' (publish into them, deliveries
	// from them...).
	kindVHost = newKind(famMsgRates, "publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
		"deliver_get", "ack", "redeliver", "dead_lettered", "messages", "messages_ready", "messages_unacknowledged",
		famDataRates, "recv_oct", "send_oct")
	// kindOverview: message_stats under msg_rates, queue_totals under
	// lengths (RabbitMQ's overview).
	kindOverview = newKind(famMsgRates, "publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
		"deliver_no_ack", "get", "get_no_ack", "get_empty", "deliver_get", "redeliver", "ack", "disk_reads",
		"disk_writes", "dead_lettered",
		famLengths, "messages", "messages_ready", "messages_unacknowledged")
	kindNode = newKind(famNodeStats, "mem_used", "fd_used", "sockets_used", "proc_used", "disk_free")
)

// DefaultHistoryRetention is how long the history keeps samples by
// default: 10 minutes, RabbitMQ's basic retention policy ({605, 5}).
const DefaultHistoryRetention = 605 * time.Second

// history is the store. Ticks are numbered from 1; times[t%n] is tick
// t's time (Unix ms) for the last n ticks.
type history struct {
	mu    sync.RWMutex
	n     uint64
	seq   uint64
	times []int64
	objs  map[string]*objHist
}

// objHist is one object's history (see the package comment above).
type objHist struct {
	kind    *histKind
	born    uint64 // the tick of its first sample
	anchor  uint64 // base holds its values at this tick
	last    uint64 // the tick of its last change (or anchor)
	seen    uint64 // the last tick that sampled it
	changed int64  // when its values last changed (Unix ms), for idle_since
	vals    []uint64
	buf     []byte // the changes after anchor
	off     int    // buf[off:] is live
	lastOff int    // buf[lastOff:] is the change at tick last; -1: none
}

func (o *objHist) base() []uint64 { return o.vals[:len(o.kind.fields)] }
func (o *objHist) cur() []uint64  { return o.vals[len(o.kind.fields):] }

func newHistory(ticks int) *history {
	if ticks < 2 {
		ticks = 2
	}
	return &history{n: uint64(ticks), times: make([]int64, ticks), objs: map[string]*objHist{}}
}

// tick starts a sample round at now (Unix ms). Call with mu held.
func (h *history) tick(now int64) {
	h.seq++
	h.times[h.seq%h.n] = now
}

// oldest is the oldest retained tick.
func (h *history) oldest() uint64 {
	if h.seq < h.n {
		return 1
	}
	return h.seq - h.n + 1
}

// record sets key's values at the current tick. Call with mu held,
// after tick.
func (h *history) record(key string, k *histKind, vals []uint64) {
	o := h.objs[key]
	if o == nil || o.kind != k {
		o = &objHist{kind: k, born: h.seq, anchor: h.seq, last: h.seq, vals: make([]uint64, 2*len(k.fields)),
			changed: h.times[h.seq%h.n], lastOff: -1}
		copy(o.base(), vals)
		copy(o.cur(), vals)
		o.seen = h.seq
		h.objs[key] = o
		return
	}
	o.seen = h.seq
	cur := o.cur()
	var mask uint64
	for i, v := range vals {
		if v != cur[i] {
			mask |= 1 << i
		}
	}
	if mask != 0 {
		o.room(2*binary.MaxVarintLen64 + bits.OnesCount64(mask)*binary.MaxVarintLen64)
		o.lastOff = len(o.buf)
		o.buf = binary.AppendUvarint(o.buf, h.seq-o.last)
		o.buf = binary.AppendUvarint(o.buf, mask)
		for i, v := range vals {
			if mask&(1<<i) != 0 {
				o.buf = binary.AppendVarint(o.buf, int64(v-cur[i]))
				cur[i] = v
			}
		}
		o.last = h.seq
		o.changed = h.times[h.seq%h.n]
	}
	o.evict(h.oldest())
}

// room makes room in buf for need more bytes: it moves the live changes
// to the front when a quarter of buf or more is dead, or reallocates with
// half the live size spare, so that buf stays within about 1.5 times
// the live changes.
func (o *objHist) room(need int) {
	if len(o.buf)+need <= cap(o.buf) {
		return
	}
	live := len(o.buf) - o.off
	if o.lastOff >= 0 {
		o.lastOff -= o.off
	}
	if o.off >= cap(o.buf)/4 && live+need <= cap(o.buf) {
		n := copy(o.buf, o.buf[o.off:])
		o.buf, o.off = o.buf[:n], 0
		return
	}
	nb := make([]byte, live, live+need+live/2+16)
	copy(nb, o.buf[o.off:])
	o.buf, o.off = nb, 0
}

// next decodes the change at buf[off:]: its tick (from prev), the mask,
// and the offset after it. The deltas are applied to into.
func (o *objHist) next(off int, prev uint64, into []uint64) (tick uint64, end int) {
	d, n := binary.Uvarint(o.buf[off:])
	off += n
	mask, n := binary.Uvarint(o.buf[off:])
	off += n
	for i := range into {
		if mask&(1<<i) != 0 {
			dv, n := binary.Varint(o.buf[off:])
			off += n
			into[i] += uint64(dv)
		}
	}
	return prev + d, off
}

// evict folds the changes before tick min into base.
func (o *objHist) evict(min uint64) {
	for o.off < len(o.buf) {
		d, _ := binary.Uvarint(o.buf[o.off:])
		if o.anchor+d >= min {
			break
		}
		if o.off == o.lastOff {
			o.lastOff = -1
		}
		o.anchor, o.off = o.next(o.off, o.anchor, o.base())
	}
	if o.off == len(o.buf) {
		o.buf, o.off = o.buf[:0], 0
	}
}

// rate is field's per-second rate between the last two ticks under key
// (0 until it has two samples), RabbitMQ's instantaneous rate.
func (h *history) rate(key, field string) float64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	o := h.objs[key]
	if o == nil || o.born >= h.seq || o.seen != h.seq {
		return 0
	}
	i, ok := o.kind.index[field]
	if !ok {
		return 0
	}
	var d int64 // the change at the last tick
	if o.last == h.seq && o.lastOff >= 0 {
		into := make([]uint64, len(o.kind.fields))
		o.next(o.lastOff, 0, into)
		d = int64(into[i])
	}
	dt := float64(h.times[h.seq%h.n]-h.times[(h.seq-1)%h.n]) / 1000
	if dt <= 0 {
		return 0
	}
	return float64(d) / dt
}

// idleSince returns since when the object under key has been idle, given
// its counters now: when the sampler last saw them change, if they did
// not since; now for an object the sampler has not seen yet. ok is false
// when they changed since the last sample (active).
func (h *history) idleSince(key string, now counters) (time.Time, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	o := h.objs[key]
	if o == nil {
		return time.Now(), true
	}
	cur := o.cur()
	for f, v := range now {
		if i, ok := o.kind.index[f]; ok && cur[i] != v {
			return time.Time{}, false
		}
	}
	return time.UnixMilli(o.changed), true
}

// sweep forgets the objects the last tick did not sample (deleted).
func (h *history) sweep() {
	for k, o := range h.objs {
		if o.seen != h.seq {
			delete(h.objs, k)
		}
	}
}

// tickAt returns the latest retained tick at or before t (ms), 0 if t is
// before them all.
func (h *history) tickAt(t int64) uint64 {
	lo, hi := h.oldest(), h.seq
	if h.seq == 0 || h.times[lo%h.n] > t {
		return 0
	}
	for lo < hi { // the last tick whose time <= t
		mid := (lo + hi + 1) / 2
		if h.times[mid%h.n] <= t {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// values returns key's values at each of the times in grid (ascending, Unix
// ms): a row per grid point, the value at the last tick at or before it;
// 0 before the object existed; its oldest known values before the
// retention. nil if the object is unknown.
func (h *history) values(key string, grid []int64) [][]uint64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	o := h.objs[key]
	if o == nil {
		return nil
	}
	nf := len(o.kind.fields)
	rows := make([][]uint64, len(grid))
	flat := make([]uint64, len(grid)*nf)
	acc := append([]uint64(nil), o.base()...)
	at, off := o.anchor, o.off
	for i, t := range grid {
		row := flat[i*nf : (i+1)*nf]
		rows[i] = row
		k := h.tickAt(t)
		switch {
		case k == 0 && o.born < h.oldest():
			copy(row, o.base()) // before the retention: the oldest known
			continue
		case k < o.born:
			continue // before the object: zeros
		}
		for off < len(o.buf) {
			d, _ := binary.Uvarint(o.buf[off:])
			if at+d > k {
				break
			}
			at, off = o.next(off, at, acc)
		}
		copy(row, acc)
	}
	return rows
}

// size is the store's memory, roughly: the Go values it holds (for the
// cost measurement).
func (h *history) size() (objects int, bytes int64) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	bytes = int64(8 * len(h.times))
	for k, o := range h.objs {
		bytes += int64(len(k)) + 16 + 8 // the key and the map's entry
		bytes += 8*7 + 24*2 + 8*2       // objHist
		bytes += int64(8*cap(o.vals) + cap(o.buf))
	}
	return len(h.objs), bytes
}

// histRange is one family's requested range, as RabbitMQ's: grid points
// first, first+incr, ... up to last (Unix ms).
type histRange struct {
	first, last, incr int64
}

func (r *histRange) grid() []int64 {
	var g []int64
	for t := r.first; t <= r.last; t += r.incr {
		g = append(g, t)
	}
	return g
}

// maxRangeSamples is RabbitMQ's ?MAX_RANGE: age/incr at most 500.
const maxRangeSamples = 500

// rangeError is the reply to invalid range parameters.
type rangeError struct{ age, incr int64 }

func (e *rangeError) Error() string {
	return fmt.Sprintf("Invalid range parameters: age %d, incr %d", e.age, e.incr)
}

// parseRanges reads the four families' <prefix>_age and <prefix>_incr
// (seconds) as RabbitMQ's rabbit_mgmt_util:range: a family whose two
// parameters are not both integers has no range; both must be > 0 and
// age/incr <= 500, or the request fails. last is now rounded down to a
// multiple of incr, up for lengths when ceilLengths (the queue,
// connection and node endpoints, RabbitMQ's range_ceil).
func parseRanges(q url.Values, now int64, ceilLengths bool) ([numFamilies]*histRange, error) {
	var out [numFamilies]*histRange
	for f, p := range famPrefix {
		age, err1 := strconv.ParseInt(q.Get(p+"_age"), 10, 64)
		incr, err2 := strconv.ParseInt(q.Get(p+"_incr"), 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if age <= 0 || incr <= 0 || age/incr > maxRangeSamples {
			return out, &rangeError{age, incr}
		}
		a, i := age*1000, incr*1000
		last := now / i * i
		if ceilLengths && histFamily(f) == famLengths && last != now {
			last += i
		}
		out[f] = &histRange{first: last - a, last: last, incr: i}
	}
	return out, nil
}

// histDetails renders one field's <stat>_details for a range, as
// RabbitMQ's rabbit_mgmt_stats:format_range: samples newest first; rate
// from the two newest when the newest is within interval of the range's
// end; avg_rate over the whole range and avg of the samples when there
// are two or more.
func histDetails(r *histRange, grid []int64, col func(i int) uint64, interval int64) api.Details {
	n := len(grid)
	d := api.Details{Samples: make([]api.Sample, n)}
	var sum float64
	for i := range grid {
		v := col(i)
		sum += float64(v)
		d.Samples[n-1-i] = api.Sample{Sample: v, Timestamp: grid[i]}
	}
	if n >= 2 {
		diff := func(a, b int) float64 { // (v_a - v_b) per second
			va, vb := col(a), col(b)
			d := float64(va - vb)
			if va < vb {
				d = -float64(vb - va)
			}
			return d * 1000 / float64(grid[a]-grid[b])
		}
		if grid[n-1] >= r.last-interval {
			d.Rate = diff(n-1, n-2)
		}
		avgRate, avg := diff(n-1, 0), sum/float64(n)
		d.AvgRate, d.Avg = &avgRate, &avg
	}
	return d
}

// histReq is a request's ranges and the histories it has read.
type histReq struct {
	r     [numFamilies]*histRange
	grids [numFamilies][]int64
	any   bool
	mu    sync.Mutex
	cache map[string][][]uint64 // by object key and family
}

// parseHistory reads the request's range parameters (once), failing as
// RabbitMQ does: 400 with "invalid_range_parameters" as the error on the
// queue, exchange and vhost lists, "bad_request" elsewhere.
func (c *call) parseHistory(listErr, ceilLengths bool) error {
	if c.hist != nil {
		return nil
	}
	r, err := parseRanges(c.r.URL.Query(), time.Now().UnixMilli(), ceilLengths)
	if err != nil {
		e := badRequest(err.Error())
		if listErr {
			e.Err = "invalid_range_parameters"
		}
		return e
	}
	hr := &histReq{r: r, cache: map[string][][]uint64{}}
	for f, rg := range r {
		if rg != nil {
			hr.grids[f] = rg.grid()
			hr.any = true
		}
	}
	c.hist = hr
	return nil
}

// rangeQuery is the request's valid range parameters, as a query string
// ("" if none), for the requests a node passes on to the others.
func (c *call) rangeQuery() string {
	if c.hist == nil || !c.hist.any {
		return ""
	}
	q := url.Values{}
	in := c.r.URL.Query()
	for f, p := range famPrefix {
		if c.hist.r[f] != nil {
			q.Set(p+"_age", in.Get(p+"_age"))
			q.Set(p+"_incr", in.Get(p+"_incr"))
		}
	}
	return "?" + q.Encode()
}

// histRows returns key's values on family f's grid (nil: no such range,
// or the sampler has not seen the object).
func (c *call) histRows(key string, f histFamily) [][]uint64 {
	hr := c.hist
	if hr == nil || hr.r[f] == nil {
		return nil
	}
	ck := key + "|" + strconv.Itoa(int(f))
	hr.mu.Lock()
	defer hr.mu.Unlock()
	rows, ok := hr.cache[ck]
	if !ok {
		rows = c.s.hist.values(key, hr.grids[f])
		hr.cache[ck] = rows
	}
	return rows
}

// det renders field's <stat>_details for the object under key: its rate,
// or with a range for the field's family, its history.
func (c *call) det(key string, k *histKind, field string) api.Details {
	i, ok := k.index[field]
	if !ok || c.hist == nil || c.hist.r[k.family[i]] == nil {
		return details(c.s.hist.rate(key, field))
	}
	f := k.family[i]
	rows := c.histRows(key, f)
	return c.detFromRows(f, func(j int) uint64 {
		if rows == nil {
			return 0 // not sampled yet: new
		}
		return rows[j][i]
	})
}

// detFromRows renders a <stat>_details for family f from a column of
// values on its grid.
func (c *call) detFromRows(f histFamily, col func(j int) uint64) api.Details {
	return histDetails(c.hist.r[f], c.hist.grids[f], col, c.s.cfg.SampleInterval.Milliseconds())
}

// hasRange reports whether the request asks for family f's history.
func (c *call) hasRange(f histFamily) bool { return c.hist != nil && c.hist.r[f] != nil }

// histPart adds to a node's overview part the history of its overview
// and vhosts on the request's grids, for the node that sums the parts.
func (c *call) histPart(p *overviewParts) {
	if c.hist == nil || !c.hist.any {
		return
	}
	p.Hist = map[string][][]uint64{}
	keys := []string{"overview"}
	for _, vn := range c.s.b.VHosts() {
		keys = append(keys, vhostKey(vn))
	}
	for _, k := range keys {
		for f := range numFamilies {
			if rows := c.histRows(k, f); rows != nil {
				p.Hist[k+"|"+strconv.Itoa(int(f))] = rows
			}
		}
	}
}

// sumRows sums, over the cluster's overview parts, the rows of the
// objects under keys (all of one kind) on family f's grid; a part whose
// grid differs in length is left out.
func (c *call) sumRows(keys []string, f histFamily, nf int) [][]uint64 {
	n := len(c.hist.grids[f])
	flat := make([]uint64, n*nf)
	out := make([][]uint64, n)
	for i := range out {
		out[i] = flat[i*nf : (i+1)*nf]
	}
	for _, p := range c.clusterParts() {
		for _, k := range keys {
			rows := p.Hist[k+"|"+strconv.Itoa(int(f))]
			if len(rows) != n {
				continue
			}
			for i, row := range rows {
				for j := 0; j < nf && j < len(row); j++ {
					out[i][j] += row[j]
				}
			}
		}
	}
	return out
}

// detSum renders field's <stat>_details from summed rows of kind k.
func (c *call) detSum(rows [][]uint64, k *histKind, field string, rate float64) api.Details {
	i := k.index[field]
	f := k.family[i]
	return c.detFromRows(f, func(j int) uint64 { return rows[j][i] })
}
