package mgmt

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

func (s *Server) queueRoutes() {
	s.handle("GET /api/queues", lvlManagement, (*call).queues)
	s.handle("GET /api/queues/{vhost}", lvlManagement, (*call).queues)
	s.handle("GET /api/queues/{vhost}/{name}", lvlManagement, (*call).queueGet)
	s.handle("PUT /api/queues/{vhost}/{name}", lvlManagement, (*call).queuePut)
	s.handle("DELETE /api/queues/{vhost}/{name}", lvlManagement, (*call).queueDelete)
	s.handle("DELETE /api/queues/{vhost}/{name}/contents", lvlManagement, (*call).queuePurge)
	s.handle("POST /api/queues/{vhost}/{name}/get", lvlManagement, (*call).queueGetMessages)
	s.handle("GET /api/queues/{vhost}/{name}/bindings", lvlManagement, (*call).queueBindings)
	s.handle("POST /api/queues/{vhost}/{name}/actions", lvlManagement, (*call).queueActions)
	s.handle("GET /api/queues/{vhost}/{name}/raft", lvlMonitoring, (*call).queueRaft)
}

// queueRaft is Warren's: this node's member of a replicated quorum queue's
// Raft group (issue 14), 404 when the node runs none. The leader's
// GET /api/queues/{vhost}/{name} gathers every member's in "raft".
func (c *call) queueRaft() error {
	_, q, err := c.queue()
	if err != nil {
		return err
	}
	info, ok := q.QuorumInfo(nil)
	if !ok || !info.Member {
		return errNotFound
	}
	return c.ok(raftJSON(info.Status))
}

func raftJSON(st broker.QuorumStatus) api.Raft {
	return api.Raft{Term: st.Term, CommitIndex: st.Commit, LastApplied: st.Applied, LastIndex: st.LastIndex,
		SnapshotIndex: st.SnapshotIndex, LogBytes: st.LogBytes, LogEntries: st.LogEntries,
		Quiesced: st.Quiesced, Leader: st.Leader}
}

// queueActions takes RabbitMQ's classic mirrored queue actions: sync and
// cancel_sync, which have nothing to do on a single node.
func (c *call) queueActions() error {
	_, _, err := c.queue()
	if err != nil {
		return err
	}
	var b struct {
		Action string `json:"action"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	switch b.Action {
	case "sync", "cancel_sync":
		return c.noContent()
	}
	return badRequestList("unknown", b.Action)
}

// nilIfEmpty is s, or RabbitMQ's null for none.
func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// queueHead is what a queue's record says of it, on any node.
func queueHead(v *broker.VHost, q *broker.Queue, node, state string) api.Queue {
	args := map[string]any{}
	if q.Args != nil {
		args = broker.TableJSON(q.Args)
	}
	typ := q.Effective().Type
	if typ == "" {
		typ = "classic"
	}
	pol, opPol := v.QueuePolicy(q)
	return api.Queue{Name: q.Name, VHost: v.Name, Node: node, Type: typ, State: state,
		Durable: q.Durable, AutoDelete: q.AutoDelete, Exclusive: q.Exclusive, Arguments: args,
		Policy: nilIfEmpty(pol), OperatorPolicy: nilIfEmpty(opPol),
		EffectivePolicyDefinition: v.EffectivePolicyDefinition(q)}
}

func (c *call) queueJSON(v *broker.VHost, q *broker.Queue) api.Queue {
	st := q.Stats()
	s := c.s
	key := queueKey(v.Name, q.Name)
	m := queueHead(v, q, s.node, "running")
	msgs := st.Ready + st.Unacked
	qc := queueCounters(st)
	ms := c.statsWithRates(key, kindQueue, qc, "publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "deliver_get", "ack", "redeliver")
	// Warren's own: the messages the queue dead-lettered (issue 15).
	ms["dead_lettered"] = qc["dead_lettered"]
	ms["dead_lettered_details"] = c.det(key, kindQueue, "dead_lettered")
	dead := map[string]uint64{}
	for r, n := range st.DeadLettered {
		dead[r] = n
	}
	consumerDetails := []api.Consumer{}
	for _, cs := range c.queueConsumers()[[2]string{v.Name, q.Name}] {
		consumerDetails = append(consumerDetails, consumerJSON(s.node, cs))
	}
	var owner *string
	if q.Exclusive {
		owner = new(string)
	}
	live := &api.QueueLive{
		OwnerPidDetails: owner,
		Consumers:       st.Consumers, ConsumerCapacity: boolRate(st.Consumers > 0), ConsumerUtilisation: boolRate(st.Consumers > 0),
		ConsumerDetails: consumerDetails,
		Messages:        msgs, MessagesDetails: c.det(key, kindQueue, "messages"),
		MessagesReady: st.Ready, MessagesReadyDetails: c.det(key, kindQueue, "messages_ready"),
		MessagesUnacknowledged: st.Unacked, MessagesUnackedDetails: c.det(key, kindQueue, "messages_unacknowledged"),
		MessagesRAM: st.Ready - st.PagedOut + st.Unacked, MessagesReadyRAM: st.Ready - st.PagedOut, MessagesUnacknowledgedRAM: st.Unacked,
		MessagesPersistent: st.Persistent, MessageBytesPersistent: st.PersistentBytes, MessagesPagedOut: st.PagedOut,
		MessageBytes: st.ReadyBytes + st.UnackedBytes, MessageBytesReady: st.ReadyBytes,
		MessageBytesUnacknowledged: st.UnackedBytes,
		MessageBytesRAM:            st.ReadyBytes - st.PagedOutBytes + st.UnackedBytes, MessageBytesPagedOut: st.PagedOutBytes,
		MessageStats: ms,
		// memory: an estimate, the bodies in memory and ~256 bytes of
		// bookkeeping per message held in memory.
		Memory:            st.ReadyBytes - st.PagedOutBytes + 256*int64(st.Ready-st.PagedOut+st.Unacked),
		ReductionsDetails: details(0),
		GarbageCollection: map[string]any{},
		// Warren's own: dead letters by reason, and returns to the queue
		// (a requeue loop shows here).
		MessagesDeadLettered: dead, MessagesRequeued: st.Requeued,
		MessagesDelayed: st.Delayed,
	}
	if at, idle := s.hist.idleSince(key, qc); idle {
		live.IdleSince = idleJSON(at)
	}
	m.QueueLive = live
	if m.Type == "quorum" {
		// A one-node "cluster": this node leads and is the only member.
		dlx, dlxBytes := st.DeadLetterPending, int64(0)
		m.QueueQuorum = &api.QueueQuorum{Leader: &s.node, Members: []string{s.node}, Online: []string{s.node},
			MessagesDLX: &dlx, MessageBytesDLX: &dlxBytes, OpenFiles: map[string]int{s.node: 0}}
		c.quorumFields(&m, q)
	}
	if in, ok := q.StreamInfo(); ok {
		live.Memory = 4096 + 1024*int64(len(in.Consumers)) // the files hold the messages
		m.QueueQuorum = &api.QueueQuorum{Leader: &s.node, Members: []string{s.node}, Online: []string{s.node},
			OpenFiles: map[string]int{s.node: 1 + len(in.Consumers)}}
		m.QueueStream = &api.QueueStream{Readers: map[string]int{s.node: len(in.Consumers)}, Segments: in.Segments,
			Stream: streamLogJSON(in)}
		c.streamFields(&m, q)
	}
	return m
}

// streamFields sets a replicated stream's leader, members and online
// (issue 25), as RabbitMQ shows them; nothing on a single node.
func (c *call) streamFields(m *api.Queue, q *broker.Queue) {
	members, ok := q.StreamReplicas()
	if !ok {
		return
	}
	leader, _ := q.StreamMembers()
	running := map[string]bool{c.s.node: true}
	if cl := c.s.cluster(); cl != nil {
		for _, n := range cl.Nodes() {
			running[n.Name] = n.Running
		}
	}
	g := m.QueueQuorum
	g.Members, g.Online, g.Leader = members, []string{}, nilIfEmpty(leader)
	g.OpenFiles = map[string]int{}
	for _, n := range members {
		if running[n] {
			g.Online = append(g.Online, n)
			g.OpenFiles[n] = 1
		}
	}
	if leader != "" {
		m.Node = leader
	}
}

func streamLogJSON(in broker.StreamInfo) *api.StreamLog {
	l := &api.StreamLog{Bytes: in.Bytes, NextOffset: in.Next, CommittedOffset: in.Committed, Chunks: in.Chunks,
		DamagedChunks: in.Damaged, Consumers: []api.StreamPosition{}}
	if in.Chunks > 0 {
		first, last, fts, lts := in.FirstOffset, in.LastChunkID, in.FirstTimestamp, in.LastTimestamp
		l.FirstOffset, l.LastChunkID, l.FirstTimestamp, l.LastTimestamp = &first, &last, &fts, &lts
	}
	for _, c := range in.Consumers {
		p := api.StreamPosition{ConsumerTag: c.Tag, Offset: c.Offset}
		if in.Committed > c.Offset {
			p.Lag = in.Committed - c.Offset
		}
		l.Consumers = append(l.Consumers, p)
	}
	return l
}

// quorumFields sets a replicated quorum queue's group fields (issue 14):
// RabbitMQ's leader, members and online, and Warren's raft, the local
// member's Raft metrics by node. Nothing for other queues.
func (c *call) quorumFields(m *api.Queue, q *broker.Queue) {
	up := func(string) bool { return true }
	if cl := c.s.cluster(); cl != nil {
		running := map[string]bool{}
		for _, n := range cl.Nodes() {
			running[n.Name] = n.Running
		}
		up = func(n string) bool { return running[n] }
	}
	info, ok := q.QuorumInfo(up)
	if !ok {
		return
	}
	if m.QueueQuorum == nil {
		m.QueueQuorum = &api.QueueQuorum{}
	}
	g := m.QueueQuorum
	g.Members, g.Online = info.Members, info.Online
	if g.Online == nil {
		g.Online = []string{}
	}
	g.Leader = nilIfEmpty(info.Leader)
	if info.Leader != "" {
		m.Node = info.Leader
	}
	g.OpenFiles = map[string]int{}
	for _, n := range g.Online {
		g.OpenFiles[n] = 0
	}
	if info.Member {
		g.Raft = map[string]api.Raft{c.s.node: raftJSON(info.Status)}
	}
}

// raftOfMembers adds the other online members' Raft metrics to a quorum
// queue's "raft" (one queue's GET, not the lists: a call per member).
func (c *call) raftOfMembers(m *api.Queue, v *broker.VHost, q *broker.Queue) {
	cl := c.s.cluster()
	if m.QueueQuorum == nil || m.Raft == nil || cl == nil {
		return
	}
	r := m.Raft
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range m.Online {
		if n == c.s.node {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(c.r.Context(), fetchTimeout)
			defer cancel()
			st, body, err := cl.Fetch(ctx, n, http.MethodGet, "/api/queues/"+url.PathEscape(v.Name)+"/"+url.PathEscape(q.Name)+"/raft", nil)
			var one api.Raft
			if err != nil || st != http.StatusOK || json.Unmarshal(body, &one) != nil {
				return
			}
			mu.Lock()
			r[n] = one
			mu.Unlock()
		}()
	}
	wg.Wait()
}

func boolRate(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *call) queues() error {
	vs, err := c.visibleVHosts()
	if err != nil {
		return err
	}
	if err := c.parseHistory(true, true); err != nil {
		return err
	}
	list := []api.Queue{}
	if !c.clustered() {
		for _, v := range vs {
			for _, q := range v.Queues() {
				if c.local && !q.ServedHere() {
					continue // another node's: its home node lists it
				}
				list = append(list, c.queueJSON(v, q))
			}
		}
		return listOf(c, list)
	}
	// Each queue from its home node; one whose home did not answer from
	// the record here, "down".
	remote, answered := remoteListOf[api.Queue](c)
	for _, v := range vs {
		for _, q := range v.Queues() {
			switch {
			case q.ServedHere():
				list = append(list, c.queueJSON(v, q))
			case !answered[q.HomeNode()]:
				list = append(list, c.downQueueJSON(v, q))
			}
		}
	}
	visible := map[string]bool{}
	for _, v := range vs {
		visible[v.Name] = true
	}
	for _, m := range remote {
		if visible[m.VHost] {
			list = append(list, m)
		}
	}
	return listOf(c, list)
}

// downQueueJSON is a queue whose home node is not answering, from its
// record, as RabbitMQ lists a queue on a node that is down.
func (c *call) downQueueJSON(v *broker.VHost, q *broker.Queue) api.Queue {
	m := queueHead(v, q, q.Home, "down")
	if m.Type == "quorum" {
		c.quorumFields(&m, q) // no leader: RabbitMQ's "down" quorum queue
	}
	return m
}

// queue returns the {vhost}/{name} queue, 404 if there is none.
func (c *call) queue() (*broker.VHost, *broker.Queue, error) {
	v, err := c.vhost()
	if err != nil {
		return nil, nil, err
	}
	q := v.Queue(c.pv("name"))
	if q == nil {
		return nil, nil, errNotFound
	}
	return v, q, nil
}

func (c *call) queueGet() error {
	v, q, err := c.queue()
	if err != nil {
		return err
	}
	if c.local && !q.ServedHere() {
		return errNotFound // not homed here (the asking node's record is ahead of ours)
	}
	if err := c.parseHistory(false, true); err != nil {
		return err
	}
	if c.clustered() && !q.ServedHere() {
		// Its stats are its home node's.
		ctx, cancel := context.WithTimeout(c.r.Context(), fetchTimeout)
		defer cancel()
		st, body, err := c.s.cluster().Fetch(ctx, q.HomeNode(), http.MethodGet, c.escapedPath()+c.rangeQuery(), nil)
		if err == nil && st == http.StatusOK {
			writeBody(c.w, st, body)
			return nil
		}
		return c.ok(c.downQueueJSON(v, q))
	}
	m := api.QueueDetail{Queue: c.queueJSON(v, q), Deliveries: []any{}, Incoming: []any{}}
	c.raftOfMembers(&m.Queue, v, q)
	return c.ok(m)
}

type queueBody struct {
	Durable    rbool          `json:"durable"`
	AutoDelete rbool          `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
	Node       string         `json:"node"`
	Type       string         `json:"type"`
}

func (c *call) queuePut() error {
	name := c.pv("name")
	// As RabbitMQ, before anything else: AMQP cannot name such a queue
	// (a short string). RabbitMQ checks queue names only; exchange,
	// vhost and user names of any length are taken, so they are here.
	if len(name) > 255 {
		return badRequest(fmt.Sprintf("queue should be less than 255 bytes, actually was %d\n", len(name)))
	}
	v, err := c.vhost()
	if err != nil {
		return err
	}
	var b queueBody
	if err := c.decode(&b); err != nil {
		return err
	}
	if err := c.check(v, broker.Configure, "queue", name); err != nil {
		return err
	}
	args, err := broker.JSONTable(b.Arguments)
	if err != nil {
		return changeFailed(err)
	}
	if b.Type != "" && args["x-queue-type"] == nil {
		if args == nil {
			args = map[string]any{}
		}
		args["x-queue-type"] = b.Type
	}
	spec := broker.QueueSpec{Name: name, Durable: b.Durable.or(false), AutoDelete: b.AutoDelete.or(false), Args: args}
	if cl := c.s.cluster(); cl != nil && b.Node != "" {
		// As RabbitMQ's "node": the queue's home, if it names a member.
		for _, n := range cl.Nodes() {
			if n.Name == b.Node {
				spec.Home = b.Node
			}
		}
	}
	existed := v.Queue(name) != nil
	if !existed {
		if err := c.checkCreateArgs(v, "queue", name, args); err != nil {
			return err
		}
	}
	if _, _, _, err := v.DeclareQueue(spec, false); err != nil {
		return amqpError(err)
	}
	return c.created(!existed)
}

func (c *call) queueDelete() error {
	v, q, err := c.queue()
	if err != nil {
		return err
	}
	if err := c.check(v, broker.Configure, "queue", q.Name); err != nil {
		return err
	}
	qp := c.r.URL.Query()
	if _, err := v.DeleteQueue(q.Name, q.Owner, qp.Get("if-unused") == "true", qp.Get("if-empty") == "true"); err != nil {
		return amqpError(err)
	}
	return c.noContent()
}

func (c *call) queuePurge() error {
	v, q, err := c.queue()
	if err != nil {
		return err
	}
	if err := c.check(v, broker.Read, "queue", q.Name); err != nil {
		return err
	}
	q.Purge()
	return c.noContent()
}

type getBody struct {
	Count    json.Number `json:"count"`
	AckMode  string      `json:"ackmode"`
	Encoding string      `json:"encoding"`
	Truncate json.Number `json:"truncate"`
	Requeue  rbool       `json:"requeue"` // before 3.7: ackmode ack_requeue_*
}

// queueGetMessages is POST .../get: takes up to count messages, renders
// them, then settles them by ackmode: ack_requeue_true returns them (as
// RabbitMQ, marked redelivered), ack_requeue_false acks them,
// reject_requeue_true returns them as failed deliveries,
// reject_requeue_false rejects them (dead-lettering them if the queue
// has a dead-letter exchange).
func (c *call) queueGetMessages() error {
	v, q, err := c.queue()
	if err == errNotFound && v == nil && c.s.b.VHost(c.pv("vhost")) != nil {
		// RabbitMQ answers a get from a missing queue with the AMQP error.
		return &apiError{Status: http.StatusNotFound, Err: "not_found", Reason: fmt.Sprintf("NOT_FOUND - no queue '%s' in vhost '%s'", c.pv("name"), c.pv("vhost"))}
	}
	if err != nil {
		return err
	}
	var b getBody
	if err := c.decode(&b); err != nil {
		return err
	}
	if b.AckMode == "" && b.Requeue.set {
		b.AckMode = map[bool]string{true: "ack_requeue_true", false: "ack_requeue_false"}[b.Requeue.v]
	}
	switch b.AckMode {
	case "ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false":
	default:
		return badRequest(fmt.Sprintf("invalid ackmode: '%s'", b.AckMode))
	}
	if b.Encoding == "" {
		b.Encoding = "auto"
	}
	if b.Encoding != "auto" && b.Encoding != "base64" {
		return badRequest("Unsupported encoding. Please use auto or base64.")
	}
	count, err := b.Count.Int64()
	if err != nil || count < 0 {
		return badRequest("count must be a non-negative integer")
	}
	truncate := int64(0)
	if b.Truncate != "" {
		if truncate, err = b.Truncate.Int64(); err != nil {
			return badRequest("truncate must be an integer")
		}
	}
	if err := c.checkChannel(v, broker.Read, "queue", q.Name); err != nil {
		return err
	}
	var ds []broker.Delivery
	out := []api.Message{}
	for range count {
		d, remaining, ok := q.Get(false)
		if !ok {
			break
		}
		ds = append(ds, d)
		payload, enc := payloadJSON(d.Msg.Body, b.Encoding, int(truncate))
		// No properties are [], as RabbitMQ (an empty Erlang proplist);
		// rabbitmqadmin's get shows the column only then (api.Properties).
		out = append(out, api.Message{PayloadBytes: len(d.Msg.Body), Redelivered: d.Redelivered,
			Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey, MessageCount: &remaining,
			Properties: propsJSON(&d.Msg.Props), Payload: payload, PayloadEncoding: enc})
	}
	// The reply is encoded before the messages are settled: a reply that
	// cannot be sent must not have acked (lost) them.
	body, err := encodeJSON(out)
	if err != nil {
		q.Requeue(ds, false)
		c.s.log.Error("management API: cannot encode the messages got", "queue", q.Name, "vhost", v.Name, "err", err)
		return fmt.Errorf("JSON encode error: %w", err)
	}
	if len(ds) > 0 {
		switch b.AckMode {
		case "ack_requeue_true":
			q.Requeue(ds, false)
		case "ack_requeue_false":
			q.Ack(ds)
		case "reject_requeue_true":
			q.Requeue(ds, true)
		default:
			q.Reject(ds)
		}
	}
	writeBody(c.w, http.StatusOK, body)
	return nil
}
