package broker

import (
	"fmt"
	"strings"
)

// QuorumDebug describes a replicated quorum queue's client and leader
// state on this node, for a test's failure message: the epoch, the legs
// of this node's consumers, the machine's consumers and what each holds,
// the proxies this node serves.
func (q *Queue) QuorumDebug() string {
	if q.qq == nil {
		return "not replicated"
	}
	var b strings.Builder
	qc := &q.qc
	qc.mu.Lock()
	fmt.Fprintf(&b, "epoch %d leader %q term %d down %v attaching %v pending %d;", qc.epoch, qc.leader, qc.term, qc.down, qc.attaching, qc.pendLive)
	type leg struct {
		tag   string
		epoch uint64
		l     qqLeg
	}
	var legs []leg
	for _, k := range qc.cons {
		legs = append(legs, leg{k.c.Tag, k.epoch, k.leg})
	}
	qc.mu.Unlock()
	q.mu.Lock()
	for _, l := range legs {
		switch {
		case l.l.local != nil:
			out := -1
			if l.l.local.m != nil {
				out = l.l.local.m.CheckedOut()
			}
			fmt.Fprintf(&b, " leg %s epoch %d local out %d;", l.tag, l.epoch, out)
		case l.l.rc != nil:
			rc := l.l.rc
			fmt.Fprintf(&b, " leg %s epoch %d rc %d@%s active %v gone %v buf %d;", l.tag, l.epoch, rc.id, rc.node, rc.active, rc.gone, len(rc.buf))
		default:
			fmt.Fprintf(&b, " leg %s epoch %d none;", l.tag, l.epoch)
		}
	}
	fmt.Fprintf(&b, " here %v term %d;", q.qq.here.Load(), q.qq.term)
	for _, c := range q.m.Consumers() {
		fmt.Fprintf(&b, " machine consumer %s out %d;", c.Ref.Tag, c.CheckedOut())
	}
	rs := &q.vhost.b.remote
	rs.mu.Lock() // after q.mu (p.gen is under q.mu)
	for k, p := range rs.proxies {
		if p.q == q {
			fmt.Fprintf(&b, " proxy %s/%d gen %d out %d credit %d;", k.node, k.cid, p.gen, p.out, p.credit)
		}
	}
	rs.mu.Unlock()
	q.mu.Unlock()
	return b.String()
}
