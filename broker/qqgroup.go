package broker

import (
	"encoding/binary"
	"slices"
	"sort"
	"time"
)

// Replicated quorum queues (issue 14): the groups' lifecycle. A quorum
// queue declared in a cluster with a raft host gets its members when the
// declaring node proposes the declare (quorumMembers) and its group id
// when the declare is applied (the command's log index: unique, the same
// on every node). Every member node starts its member of the group when
// it applies the declare, and at a restart when the raft host is
// installed (SetQuorumHost); the deletion deletes the group's log. Nodes
// that are not members learn the leader from its announcements.

// defaultQuorumGroupSize is x-quorum-initial-group-size's default.
const defaultQuorumGroupSize = 3

// quorumMembers chooses the members of a new quorum queue's group: the
// preferred leader (s.Home, the leader locator's choice) first, then this
// node, then the nodes with the fewest quorum queue members, ties by
// name, up to x-quorum-initial-group-size (default 3, at most the
// cluster's size). Nil when the queue is not replicated: a single node,
// no raft host, not a quorum queue, an exclusive queue.
func (b *Broker) quorumMembers(s QueueSpec) []string {
	if queueTypeOf(s.Args) == QueueTypeStream && !s.Exclusive {
		return b.streamMembers(s)
	}
	if b.node == "" || s.Exclusive || b.quorumHost() == nil {
		return nil
	}
	if typ, _ := s.Args["x-queue-type"].(string); typ != QueueTypeQuorum {
		return nil
	}
	size := defaultQuorumGroupSize
	if n, ok := IntArg(s.Args["x-quorum-initial-group-size"]); ok && n > 0 {
		size = int(min(n, 1<<16))
	}
	return b.chooseMembers(s.Home, size, func(q *Queue) []string {
		if q.qq != nil {
			return q.qq.memberList()
		}
		return nil
	})
}

// chooseMembers chooses the members of a new replicated queue: home (the
// leader locator's choice) first, then this node, then the nodes with the
// fewest members of queues of the kind (membersOf), ties by name, up to
// size (at most the cluster's size).
func (b *Broker) chooseMembers(home string, size int, membersOf func(*Queue) []string) []string {
	nodes := []string{b.node}
	if b.nodes != nil {
		if ns := b.nodes(); len(ns) > 0 {
			nodes = ns
		}
	}
	size = min(size, len(nodes))
	count := map[string]int{}
	for _, name := range b.VHosts() {
		v := b.VHost(name)
		if v == nil {
			continue
		}
		v.mu.RLock()
		for _, q := range v.queues {
			for _, m := range membersOf(q) {
				count[m]++
			}
		}
		v.mu.RUnlock()
	}
	var members []string
	add := func(n string) {
		if n != "" && len(members) < size && !slices.Contains(members, n) && slices.Contains(nodes, n) {
			members = append(members, n)
		}
	}
	add(home)
	add(b.node)
	rest := slices.Clone(nodes)
	sort.Slice(rest, func(i, j int) bool {
		if count[rest[i]] != count[rest[j]] {
			return count[rest[i]] < count[rest[j]]
		}
		return rest[i] < rest[j]
	})
	for _, n := range rest {
		add(n)
	}
	return members
}

// start starts this node's member of the group, if it is one and the
// raft host is installed (a restarted node's groups start at
// SetQuorumHost). fresh: the group is new (its declare is being
// applied): the preferred leader campaigns at once.
func (s *qqState) start(fresh bool) {
	b := s.q.vhost.b
	h := b.quorumHost()
	if h == nil {
		return
	}
	if !slices.Contains(s.members, b.node) {
		s.ask(h) // the leader may have announced itself before
		return
	}
	s.smu.Lock()
	if s.g != nil || s.gone || s.starting {
		s.smu.Unlock()
		return
	}
	s.starting = true
	s.smu.Unlock()
	g, err := h.StartGroup(s.id, s.members, (*qqSM)(s), false)
	s.smu.Lock()
	s.starting = false
	if err != nil {
		s.smu.Unlock()
		b.log.Error("quorum queue: starting its group member", "queue", s.q.Name, "vhost", s.q.vhost.Name, "group", s.id, "err", err)
		return
	}
	if s.gone { // deleted meanwhile
		s.smu.Unlock()
		h.DeleteGroup(s.id)
		return
	}
	s.g = g
	takeover, term := s.pending, s.pterm
	s.pending = false
	s.smu.Unlock()
	if takeover {
		s.leaderChanged(b.node, term, true)
	}
	if fresh && s.members[0] == b.node && len(s.members) > 1 {
		go s.campaign(g)
	}
}

// campaign makes this node, the preferred leader of a new group (the
// leader locator's choice), its first leader: it campaigns until the
// group has a leader (the other members start theirs when they apply
// the declare, a little later).
func (s *qqState) campaign(g QuorumGroup) {
	campaignUntilLed(qqCampaignEvery, func() bool { l, _ := g.Leader(); return l != "" }, func() bool {
		s.smu.Lock()
		gone := s.gone
		s.smu.Unlock()
		return gone || g.Campaign() != nil
	})
}

// campaignUntilLed calls campaign every interval, for 3 s at most, until
// led reports a leader or campaign reports that it is no use (a new
// replicated group's preferred leader: quorum queues', streams').
func campaignUntilLed(every time.Duration, led func() bool, campaign func() (stop bool)) {
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(every) {
		if led() || campaign() {
			return
		}
	}
}

// qqCampaignEvery is how often a new group's preferred leader campaigns
// while the group has no leader.
const qqCampaignEvery = 30 * time.Millisecond

// delete deletes this node's member of the group with the queue.
func (s *qqState) delete() {
	s.smu.Lock()
	s.gone = true
	g := s.g
	s.g = nil
	s.smu.Unlock()
	s.here.Store(false)
	s.newEpoch() // dead letters waiting for their marks give up
	if g != nil {
		if h := s.q.vhost.b.quorumHost(); h != nil {
			h.DeleteGroup(s.id)
		}
	}
}

// --- announcements ---

// Quorum message opcodes (HandleQuorumMessage).
const (
	opQQLeader byte = 'L' // vhost, queue, group, term, leader
	opQQAsk    byte = 'A' // vhost, queue, group: a non-member asks the members who leads
)

// ask asks the members who leads (a node that is not a member, when it
// creates or recovers the queue): the leader answers with its
// announcement.
func (s *qqState) ask(h QuorumHost) {
	buf := []byte{opQQAsk}
	buf = appendStr(buf, s.q.vhost.Name)
	buf = appendStr(buf, s.q.Name)
	buf = binary.AppendUvarint(buf, s.id)
	for _, m := range s.members {
		_ = h.Announce(m, buf)
	}
}

func (s *qqState) announcement() []byte {
	l := s.leader.Load()
	buf := []byte{opQQLeader}
	buf = appendStr(buf, s.q.vhost.Name)
	buf = appendStr(buf, s.q.Name)
	buf = binary.AppendUvarint(buf, s.id)
	buf = binary.AppendUvarint(buf, l.term)
	return appendStr(buf, l.node)
}

// announceAll tells every other node that this node leads.
func (s *qqState) announceAll() {
	b := s.q.vhost.b
	h := b.quorumHost()
	if h == nil || b.nodes == nil {
		return
	}
	msg := s.announcement()
	for _, n := range b.nodes() {
		if n != b.node {
			_ = h.Announce(n, msg)
		}
	}
}

// HandleQuorumMessage handles a one-way quorum queue message from node
// from (the glue's handler for the raft host's announcements).
func (b *Broker) HandleQuorumMessage(from string, msg []byte) {
	if len(msg) == 0 {
		return
	}
	d := newDecoder(msg[1:])
	switch msg[0] {
	case opQQAsk:
		vn, qn, group := d.Str(), d.Str(), d.Uvarint()
		if d.Err() != nil {
			return
		}
		if v := b.VHost(vn); v != nil {
			if q := v.Queue(qn); q != nil && q.qq != nil && q.qq.id == group && q.qq.here.Load() {
				if h := b.quorumHost(); h != nil {
					_ = h.Announce(from, q.qq.announcement())
				}
			}
		}
	case opQQLeader:
		vn, qn := d.Str(), d.Str()
		group, term, leader := d.Uvarint(), d.Uvarint(), d.Str()
		if d.Err() != nil {
			return
		}
		v := b.VHost(vn)
		if v == nil {
			return
		}
		q := v.Queue(qn)
		if q == nil || q.qq == nil || q.qq.id != group {
			return
		}
		q.qq.announced(leader, term)
	}
}

// announced is a leader's announcement: members know from their group.
func (s *qqState) announced(leader string, term uint64) {
	s.smu.Lock()
	member := s.g != nil
	s.smu.Unlock()
	if member {
		return
	}
	if s.setLeader(leader, term) {
		s.notify(leader, term)
	}
}

// QuorumPeerState tells the quorum queues that node became reachable or
// not (the glue calls it with PeerState): a node that comes up hears of
// the queues this node leads; when a leader's node goes down, this node
// knows no leader for its queues until a new one is reported.
func (b *Broker) QuorumPeerState(node string, up bool) {
	if node == b.node {
		return
	}
	h := b.quorumHost()
	if h == nil {
		return
	}
	for _, q := range b.quorumQueues() {
		s := q.qq
		if up {
			if s.here.Load() {
				_ = h.Announce(node, s.announcement())
			}
			// A member that forgot its leader when the link went down
			// (a flap: the group kept its leader) takes it back.
			s.smu.Lock()
			g := s.g
			s.smu.Unlock()
			if g != nil && s.leaderNode() == "" {
				if l, term := g.Leader(); l != "" && l != b.node && s.setLeader(l, term) {
					s.notify(l, term)
				}
			}
			continue
		}
		if l := s.leader.Load(); l.node == node && !s.here.Load() {
			if s.leader.CompareAndSwap(l, &qqLeader{term: l.term}) {
				s.notify("", l.term)
			}
		}
	}
}

// --- status ---

// QuorumInfo is a replicated quorum queue's group as this node knows it,
// for the management API (RabbitMQ's leader, members, online).
type QuorumInfo struct {
	Leader  string
	Members []string
	Online  []string
	Group   uint64 // the group's id
	// Status is this node's member's view (zero on other nodes).
	Status QuorumStatus
	Member bool
}

// QuorumInfo returns q's group, false when q is not a replicated quorum
// queue. up reports whether a node is reachable.
func (q *Queue) QuorumInfo(up func(node string) bool) (QuorumInfo, bool) {
	s := q.qq
	if s == nil {
		return QuorumInfo{}, false
	}
	info := QuorumInfo{Leader: s.leaderNode(), Members: s.memberList(), Group: s.id}
	s.smu.Lock()
	g := s.g
	s.smu.Unlock()
	if g != nil {
		info.Member = true
		info.Status = g.Status()
		if len(info.Status.Members) > 0 {
			info.Members = slices.Clone(info.Status.Members)
		}
	}
	sort.Strings(info.Members)
	for _, m := range info.Members {
		if m == q.vhost.b.node || up == nil || up(m) {
			info.Online = append(info.Online, m)
		}
	}
	return info, true
}

// importGroups are the groups of the replicated quorum queues a
// definitions import creates: their members by scopedKey, and the
// import's log index.
type importGroups struct {
	members map[string][]string
	index   uint64
	n       uint64 // the queues given a group so far
}

// importGroupID is the group id of the n'th replicated quorum queue an
// import at log index creates: the top bit apart from the declares' ids
// (their log indices), unique and the same on every node.
func importGroupID(index, n uint64) uint64 { return 1<<63 | index<<16 | n&0xFFFF }
