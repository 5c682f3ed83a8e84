package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// What the management API (package mgmt) reads from the server: the open
// connections, channels and consumers, and message counters. Every read is
// a snapshot taken under the owners' locks; nothing here is on the hot
// path except the counters, which are per channel and uncontended.

const (
	modeConfirm = 1
	modeTx      = 2
)

// countingReader counts the bytes read from a connection's socket.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// chanStats are a channel's message counters. The publish-side ones are
// written by the channel's reader goroutine only: atomics, on cache lines
// of their own, so that the management API can read them. The delivery
// and settle counters are written by whichever goroutine delivers (often a
// publisher's) or settles, always under channel.mu, which both hold anyway:
// plain fields, no extra cache-line traffic on the hot path.
type chanStats struct {
	// Counted by the reader goroutine in plain fields (local) and added
	// to the atomics once per read batch (flush), so that a publish costs
	// no locked instruction for them.
	local struct {
		publish, returned, confirm, dropped, getEmpty uint64
		xin, xout                                     uint64 // for channel.xcur
		dirty                                         bool
	}
	_                                             [64]byte
	publish, returned, confirm, dropped, getEmpty atomic.Uint64
	_                                             [64]byte

	// Guarded by channel.mu.
	deliver, deliverNoAck, get, getNoAck uint64
	redeliver, ack, reject, requeue      uint64

	folded bool // guarded by Server.statsMu
}

// flushStats adds the reader goroutine's local counts to the atomics the
// management API reads (conn.flushConfirms calls it once per read batch).
func (ch *channel) flushStats() {
	l := &ch.stats.local
	if !l.dirty {
		return
	}
	s := &ch.stats
	for _, c := range []struct {
		n *uint64
		a *atomic.Uint64
	}{{&l.publish, &s.publish}, {&l.returned, &s.returned}, {&l.confirm, &s.confirm}, {&l.dropped, &s.dropped}, {&l.getEmpty, &s.getEmpty}} {
		if *c.n != 0 {
			c.a.Add(*c.n)
			*c.n = 0
		}
	}
	ch.flushExchange()
	l.dirty = false
}

// flushExchange adds the local counts of the current exchange to it.
func (ch *channel) flushExchange() {
	l := &ch.stats.local
	if x := ch.xcur; x != nil && (l.xin != 0 || l.xout != 0) {
		x.in.Add(l.xin)
		x.out.Add(l.xout)
		l.xin, l.xout = 0, 0
	}
}

func (s *chanStats) countDeliver(noAck, redelivered bool) {
	if noAck {
		s.deliverNoAck++
	} else {
		s.deliver++
	}
	if redelivered {
		s.redeliver++
	}
}

func (s *chanStats) countGet(noAck, redelivered bool) {
	if noAck {
		s.getNoAck++
	} else {
		s.get++
	}
	if redelivered {
		s.redeliver++
	}
}

func (s *chanStats) countSettle(kind int, requeue bool, n int) {
	switch {
	case kind == settleAck:
		s.ack += uint64(n)
	case requeue:
		s.requeue += uint64(n)
	default:
		s.reject += uint64(n)
	}
}

// xStat counts one channel's publishes to one exchange (publish_in) and
// those that were routed (publish_out). Written by the channel's reader
// goroutine only.
type xStat struct {
	name    string
	in, out atomic.Uint64
}

// countExchange counts a publish to exchange: a map lookup only when the
// channel publishes to another exchange than the last time.
func (ch *channel) countExchange(exchange string, routed bool) {
	x := ch.xcur
	if x == nil || x.name != exchange {
		ch.flushExchange()
		ch.xmu.Lock()
		if ch.xs == nil {
			ch.xs = map[string]*xStat{}
		}
		if x = ch.xs[exchange]; x == nil {
			x = &xStat{name: exchange}
			ch.xs[exchange] = x
		}
		ch.xmu.Unlock()
		ch.xcur = x
	}
	l := &ch.stats.local
	l.xin++
	if routed {
		l.xout++
	}
	l.dirty = true
}

// ExchangeCounts are an exchange's publish counters.
type ExchangeCounts struct{ In, Out uint64 }

// exchangeKey is an exchange's vhost and name.
type exchangeKey = [2]string

// addExchanges adds ch's exchange counters to m.
func (ch *channel) addExchanges(vhost string, m map[exchangeKey]ExchangeCounts) {
	ch.xmu.Lock()
	defer ch.xmu.Unlock()
	for name, x := range ch.xs {
		k := exchangeKey{vhost, name}
		c := m[k]
		c.In += x.in.Load()
		c.Out += x.out.Load()
		m[k] = c
	}
}

// CountPublish counts a publish made other than by a client (the
// management API's publish, replays and moves) to the exchange's counters.
func (s *Server) CountPublish(vhost, exchange string, routed bool) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.closedX == nil {
		s.closedX = map[exchangeKey]ExchangeCounts{}
	}
	k := exchangeKey{vhost, exchange}
	c := s.closedX[k]
	c.In++
	if routed {
		c.Out++
	}
	s.closedX[k] = c
}

// ExchangeStats returns the publish counters of every exchange that was
// published to, by vhost and name ("" is the default exchange).
func (s *Server) ExchangeStats() map[[2]string]ExchangeCounts {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	m := make(map[exchangeKey]ExchangeCounts, len(s.closedX))
	for k, c := range s.closedX {
		m[k] = c
	}
	s.eachChannel(func(ci ConnectionInfo, ch *channel) {
		if !ch.stats.folded {
			ch.addExchanges(ci.VHost, m)
		}
	})
	return m
}

// MessageStats are message counters, as RabbitMQ's message_stats.
type MessageStats struct {
	// DiskReads and DiskWrites count message records read back from and
	// written to the message store (persistent messages, paging).
	DiskReads, DiskWrites                              uint64
	Publish, ReturnUnroutable, Confirm, DropUnroutable uint64
	GetEmpty                                           uint64
	Deliver, DeliverNoAck, Get, GetNoAck, Redeliver    uint64
	Ack, Reject, Requeue                               uint64
}

// DeliverGet is RabbitMQ's deliver_get: every message handed out.
func (m MessageStats) DeliverGet() uint64 {
	return m.Deliver + m.DeliverNoAck + m.Get + m.GetNoAck
}

// add adds ch's counters to m.
func (m *MessageStats) add(ch *channel) {
	s := &ch.stats
	m.Publish += s.publish.Load()
	m.ReturnUnroutable += s.returned.Load()
	m.DropUnroutable += s.dropped.Load()
	m.GetEmpty += s.getEmpty.Load()
	m.Confirm += s.confirm.Load()
	ch.mu.Lock()
	m.Deliver += s.deliver
	m.DeliverNoAck += s.deliverNoAck
	m.Get += s.get
	m.GetNoAck += s.getNoAck
	m.Redeliver += s.redeliver
	m.Ack += s.ack
	m.Reject += s.reject
	m.Requeue += s.requeue
	ch.mu.Unlock()
}

// foldStats adds a closing channel's counters to the server's totals, so
// that the totals never go down.
func (s *Server) foldStats(ch *channel) {
	s.statsMu.Lock()
	if !ch.stats.folded {
		ch.stats.folded = true
		s.closedStats.add(ch)
		if s.closedX == nil {
			s.closedX = map[exchangeKey]ExchangeCounts{}
		}
		ch.addExchanges(ch.c.vhostName(), s.closedX)
	}
	s.statsMu.Unlock()
}

// vhostName is the connection's vhost ("" before connection.open).
func (c *conn) vhostName() string {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	if c.vhost == nil {
		return ""
	}
	return c.vhost.Name
}

// dropChannel removes ch from its connection (reader goroutine).
func (c *conn) dropChannel(ch *channel) {
	c.chMu.Lock()
	if c.channels[ch.id] == ch {
		delete(c.channels, ch.id)
	}
	if c.lastCh == ch {
		c.lastCh = nil
	}
	c.chMu.Unlock()
}

// ConnectionInfo describes an open connection, as the management API
// shows it.
type ConnectionInfo struct {
	// Name is RabbitMQ's: "peer_host:peer_port -> host:port".
	Name              string
	ID                uint64
	User, VHost       string
	PeerHost, Host    string
	PeerPort, Port    int
	TLS               bool
	Direct            bool // in-process, a shovel's or a federation link's (DialDirect)
	ConnectedAt       time.Time
	AuthMechanism     string
	ClientProperties  amqp.Table
	Channels          int
	FrameMax          uint32
	ChannelMax        uint16
	Heartbeat         time.Duration
	RecvOct, SendOct  uint64
	RecvCnt, SendCnt  uint64
	SendPend          int  // bytes waiting for the writer
	Blocked, Starting bool // Starting: the handshake has not finished
}

// ChannelInfo describes an open channel.
type ChannelInfo struct {
	Name           string // "<connection name> (<number>)"
	Connection     string
	PeerHost       string // the connection's peer
	PeerPort       int
	Number         uint16
	User, VHost    string
	Confirm, Tx    bool
	Prefetch       int // for new consumers (basic.qos global=false)
	GlobalPrefetch int
	Unacked        int
	Consumers      int
	Unconfirmed    int
	// TxPublishes and TxAcks are the publishes and acks of the open
	// transaction, not yet committed.
	TxPublishes, TxAcks int
	Stats               MessageStats
}

// ConsumerInfo describes a consumer on a queue.
type ConsumerInfo struct {
	Tag             string
	Queue, VHost    string
	Channel         string // channel name
	Connection      string
	ChannelNumber   uint16
	PeerHost        string
	PeerPort        int
	User            string
	AckRequired     bool
	Exclusive       bool
	Prefetch        int
	Active          bool
	Args            amqp.Table
	ConnectionID    uint64
	ConsumerTimeout int64
}

func hostPort(a net.Addr) (string, int) {
	if a == nil {
		return "", 0
	}
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String(), 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func (s *Server) connList() []*conn {
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].id < cs[j].id })
	return cs
}

func (c *conn) name() string {
	if c.direct != "" {
		return "<direct " + strconv.FormatUint(c.id, 10) + ">" // (RabbitMQ names its direct ones after their process)
	}
	ph, pp := hostPort(c.nc.RemoteAddr())
	h, p := hostPort(c.nc.LocalAddr())
	return net.JoinHostPort(ph, strconv.Itoa(pp)) + " -> " + net.JoinHostPort(h, strconv.Itoa(p))
}

// info snapshots c. Fields set during the handshake are read only once
// c.vhost is set (under chMu), after which they no longer change.
func (c *conn) info() ConnectionInfo {
	ci := ConnectionInfo{Name: c.name(), ID: c.id, ConnectedAt: c.connectedAt,
		RecvOct: c.recvOct.Load(), SendOct: c.sendOct.Load(), RecvCnt: c.readFrames.Load(), SendCnt: c.sendCnt.Load()}
	c.outMu.Lock()
	ci.SendPend = len(c.out)
	c.outMu.Unlock()
	ci.PeerHost, ci.PeerPort = hostPort(c.nc.RemoteAddr())
	ci.Host, ci.Port = hostPort(c.nc.LocalAddr())
	_, ci.TLS = c.nc.(*tls.Conn)
	ci.Direct = c.direct != ""
	c.chMu.Lock()
	defer c.chMu.Unlock()
	ci.AuthMechanism, ci.ClientProperties = c.authMech, c.clientProps
	if c.vhost == nil {
		ci.Starting = true
		return ci
	}
	ci.User, ci.VHost = c.user.Name, c.vhost.Name
	ci.Channels = len(c.channels)
	ci.FrameMax, ci.ChannelMax, ci.Heartbeat = c.frameMax, c.channelMax, c.heartbeat
	ci.Blocked = c.readPaused.Load()
	return ci
}

// Connections returns the open connections that finished the handshake,
// in the order they were accepted.
func (s *Server) Connections() []ConnectionInfo {
	var out []ConnectionInfo
	for _, c := range s.connList() {
		if ci := c.info(); !ci.Starting {
			out = append(out, ci)
		}
	}
	return out
}

// CloseConnection closes the named connection with 320 CONNECTION_FORCED
// and reason (RabbitMQ's management API sends "Closed via management
// plugin"). It reports whether the connection was found.
func (s *Server) CloseConnection(name, reason string) bool {
	for _, c := range s.connList() {
		if c.name() == name {
			c.forceClose(reason)
			return true
		}
	}
	return false
}

// channels snapshots c's open channels, in number order.
func (c *conn) channelList() []*channel {
	c.chMu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		if ch != nil {
			chs = append(chs, ch)
		}
	}
	c.chMu.Unlock()
	sort.Slice(chs, func(i, j int) bool { return chs[i].id < chs[j].id })
	return chs
}

// eachChannel calls fn for every open channel of the connections that
// finished their handshake, with its connection's info.
func (s *Server) eachChannel(fn func(ConnectionInfo, *channel)) {
	for _, c := range s.connList() {
		ci := c.info()
		if ci.Starting {
			continue
		}
		for _, ch := range c.channelList() {
			fn(ci, ch)
		}
	}
}

// channelName is RabbitMQ's name of channel id of the named connection.
func channelName(conn string, id uint16) string { return conn + " (" + strconv.Itoa(int(id)) + ")" }

// Channels returns the open channels of every connection.
func (s *Server) Channels() []ChannelInfo {
	var out []ChannelInfo
	s.eachChannel(func(ci ConnectionInfo, ch *channel) { out = append(out, ch.info(ci)) })
	return out
}

func (ch *channel) info(ci ConnectionInfo) ChannelInfo {
	i := ChannelInfo{Name: channelName(ci.Name, ch.id), Connection: ci.Name, Number: ch.id,
		User: ci.User, VHost: ci.VHost, PeerHost: ci.PeerHost, PeerPort: ci.PeerPort}
	mode := ch.mode.Load()
	i.Confirm, i.Tx = mode == modeConfirm, mode == modeTx
	ch.mu.Lock()
	i.Prefetch, i.GlobalPrefetch, i.Unacked, i.Consumers = ch.prefetch, ch.globalLimit, ch.unackedCount, len(ch.consumers)
	ch.mu.Unlock()
	ch.confMu.Lock()
	if ch.publishSeq > ch.ackedUpTo {
		i.Unconfirmed = int(ch.publishSeq - ch.ackedUpTo)
	}
	ch.confMu.Unlock()
	tx := ch.txPending.Load()
	i.TxPublishes, i.TxAcks = int(tx>>32), int(tx&0xffffffff)
	i.Stats.add(ch)
	return i
}

// Consumers returns every consumer of every channel.
func (s *Server) Consumers() []ConsumerInfo {
	var out []ConsumerInfo
	s.eachChannel(func(ci ConnectionInfo, ch *channel) {
		chName := channelName(ci.Name, ch.id)
		ch.mu.Lock()
		for _, cs := range ch.consumers {
			bc := cs.bc
			if bc.Queue == nil { // the direct reply-to pseudo-consumer
				continue
			}
			out = append(out, ConsumerInfo{Tag: bc.Tag, Queue: bc.Queue.Name, VHost: ci.VHost, Channel: chName,
				Connection: ci.Name, ChannelNumber: ch.id, PeerHost: ci.PeerHost, PeerPort: ci.PeerPort, User: ci.User,
				AckRequired: !bc.NoAck, Exclusive: bc.Exclusive, Prefetch: cs.prefetch, Active: true, Args: bc.Args,
				ConnectionID: ci.ID})
		}
		ch.mu.Unlock()
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Channel != out[j].Channel {
			return out[i].Channel < out[j].Channel
		}
		return out[i].Tag < out[j].Tag
	})
	return out
}

// MessageStats returns the message counters of the server's whole life:
// those of closed channels plus those of open ones.
func (s *Server) MessageStats() MessageStats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	m := s.closedStats
	m.DiskReads, m.DiskWrites = s.broker.DiskIO()
	s.eachChannel(func(_ ConnectionInfo, ch *channel) {
		if !ch.stats.folded {
			m.add(ch)
		}
	})
	return m
}

// Alarms returns the raised resource alarms ("memory", "disk"), sorted.
func (s *Server) Alarms() []string {
	names, _ := s.alarmState()
	sort.Strings(names)
	return names
}

// Config returns the server's configuration, defaults applied.
func (s *Server) Config() Config { return s.cfg }

// WaitSynced waits until what a publish's durability token covers
// (broker.PublishResult.Durable, or several collected with
// broker.Durability.Add) is on disk, or ctx is done: the point at which a
// publisher confirm would be sent. It is the broker's WaitDurable.
func (s *Server) WaitSynced(ctx context.Context, tok broker.Durability) error {
	return s.broker.WaitDurable(ctx, tok)
}
