package mgmt

import (
	"os"
	"runtime"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/server"
)

// Rates. Every SampleInterval the sampler records the counters of the
// server and of each queue, exchange, channel, connection and vhost in
// the history (history.go); a rate is the difference between the last
// two samples over their interval, as RabbitMQ's "basic" rates mode.

type counters map[string]uint64

// idleJSON renders idle_since as RabbitMQ does.
func idleJSON(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000+00:00") }

func chanKey(name string) string { return "c\x00" + name }

func channelCounters(ch server.ChannelInfo) counters {
	st := ch.Stats
	return counters{"publish": st.Publish, "deliver_get": st.DeliverGet(), "ack": st.Ack, "redeliver": st.Redeliver,
		"reject": st.Reject, "requeue": st.Requeue, "unacked": uint64(ch.Unacked),
		"confirm": st.Confirm, "return_unroutable": st.ReturnUnroutable, "deliver": st.Deliver,
		"deliver_no_ack": st.DeliverNoAck, "get": st.Get, "get_no_ack": st.GetNoAck,
		"drop_unroutable": st.DropUnroutable, "get_empty": st.GetEmpty}
}

func queueKey(vhost, name string) string { return "q\x00" + vhost + "\x00" + name }

func exchangeKey(vhost, name string) string { return "x\x00" + vhost + "\x00" + name }

func serverCounters(m server.MessageStats) counters {
	return counters{
		"publish": m.Publish, "confirm": m.Confirm, "return_unroutable": m.ReturnUnroutable,
		"deliver": m.Deliver, "deliver_no_ack": m.DeliverNoAck, "get": m.Get, "get_no_ack": m.GetNoAck,
		"deliver_get": m.DeliverGet(), "redeliver": m.Redeliver, "ack": m.Ack,
		"drop_unroutable": m.DropUnroutable, "get_empty": m.GetEmpty,
		"disk_reads": m.DiskReads, "disk_writes": m.DiskWrites,
	}
}

// queueCounters is a queue's values by field name (queueValues as a map).
func queueCounters(st broker.QueueStats) counters {
	vals := make([]uint64, len(kindQueue.fields))
	queueValues(st, vals)
	c := make(counters, len(vals))
	for i, f := range kindQueue.fields {
		c[f] = vals[i]
	}
	return c
}

// queueValues sets into (kindQueue's fields, in order) from st, without
// a map (the sampler does it for every queue).
func queueValues(st broker.QueueStats, into []uint64) {
	var dead uint64
	for _, n := range st.DeadLettered {
		dead += n
	}
	copy(into, []uint64{st.Published, st.Deliver, st.DeliverNoAck, st.Get, st.GetNoAck, st.GetEmpty,
		st.Delivered(), st.Acked, st.Redelivered, dead,
		uint64(st.Ready + st.Unacked), uint64(st.Ready), uint64(st.Unacked)})
}

// sample records the current counters, and the history (issue 15).
func (s *Server) sample() {
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	now := time.Now()
	ms := s.srv.MessageStats()
	chans := s.srv.Channels()
	conns := s.srv.Connections()
	xstats := s.srv.ExchangeStats()
	// The queues' values in kindQueue's order, in one buffer; a vhost's
	// are their sums (kindVHost starts with kindQueue's fields) and its
	// connections' octets.
	nq := len(kindQueue.fields)
	type qs struct {
		key  string
		vals []uint64
	}
	var all []qs
	var flat []uint64
	vtot := map[string][]uint64{}
	for _, vn := range s.b.VHosts() {
		v := s.b.VHost(vn)
		if v == nil {
			continue
		}
		vc := make([]uint64, len(kindVHost.fields))
		vtot[vn] = vc
		for _, q := range v.Queues() {
			if !q.ServedHere() {
				continue // sampled on its home node
			}
			if len(flat) < nq {
				flat = make([]uint64, 256*nq)
			}
			vals := flat[:nq:nq]
			flat = flat[nq:]
			queueValues(q.Stats(), vals)
			all = append(all, qs{queueKey(vn, q.Name), vals})
			for i, n := range vals {
				vc[i] += n
			}
		}
	}
	for _, ci := range conns {
		if vc := vtot[ci.VHost]; vc != nil {
			vc[kindVHost.index["recv_oct"]] += ci.RecvOct
			vc[kindVHost.index["send_oct"]] += ci.SendOct
		}
	}
	tot := counters{}
	for _, vc := range vtot {
		for _, f := range []string{"messages", "messages_ready", "messages_unacknowledged", "dead_lettered"} {
			tot[f] += vc[kindVHost.index[f]]
		}
	}
	h := s.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tick(now.UnixMilli())
	scratch := make([]uint64, 0, 64)
	hrec := func(key string, k *histKind, c counters) {
		scratch = scratch[:0]
		for _, f := range k.fields {
			scratch = append(scratch, c[f])
		}
		h.record(key, k, scratch)
	}
	oc := serverCounters(ms)
	for k, v := range tot {
		oc[k] = v
	}
	hrec("overview", kindOverview, oc)
	nc := nodeCounters(s)
	hrec("node", kindNode, nc)
	for k, xc := range xstats {
		key := exchangeKey(k[0], k[1])
		c := counters{"publish_in": xc.In, "publish_out": xc.Out}
		hrec(key, kindExchange, c)
	}
	for _, ch := range chans {
		c := channelCounters(ch)
		hrec(chanKey(ch.Name), kindChannel, c)
	}
	for _, ci := range conns {
		key := connKey(ci.Name)
		c := counters{"recv_oct": ci.RecvOct, "send_oct": ci.SendOct}
		hrec(key, kindConn, c)
	}
	for vn, vc := range vtot {
		h.record(vhostKey(vn), kindVHost, vc)
	}
	for _, q := range all {
		h.record(q.key, kindQueue, q.vals)
	}
	h.sweep()
}

func connKey(name string) string { return "n\x00" + name }

func vhostKey(name string) string { return "v\x00" + name }

// nodeCounters are the node gauges whose rates /api/nodes shows.
func nodeCounters(s *Server) counters {
	free, _ := s.srv.DiskFree()
	return counters{"mem_used": uint64(max(server.MemoryUsed(), 0)), "disk_free": uint64(max(free, 0)),
		"sockets_used": uint64(len(s.srv.Connections())), "proc_used": uint64(runtime.NumGoroutine()), "fd_used": uint64(openFDs())}
}

// openFDs counts the process's open file descriptors (0 if unknown).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// details returns RabbitMQ's {"rate": r}.
func details(r float64) api.Details { return api.Details{Rate: r} }

// SampleNow takes a sample round at once, as the sampler does every
// SampleInterval: the rates and the history (issue 15) without waiting
// for the next tick (tests, tools). Each round is a tick of the history,
// which keeps HistoryRetention/SampleInterval ticks: rounds taken much
// faster than SampleInterval shorten the time it covers.
func (s *Server) SampleNow() { s.sample() }
