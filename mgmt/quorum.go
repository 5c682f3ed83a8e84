package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

// Quorum queue membership over the API (issue 14), RabbitMQ 4.x's
// endpoints, status codes and error bodies:
//
//	POST   /api/queues/quorum/{vhost}/{name}/replicas/add      {"node"}  204
//	DELETE /api/queues/quorum/{vhost}/{name}/replicas/delete   {"node"}  202
//	POST   /api/queues/quorum/replicas/on/{node}/grow
//	       {"vhost_pattern","queue_pattern","strategy":"all"|"even"}     204
//	DELETE /api/queues/quorum/replicas/on/{node}/shrink                  202
//	POST   /api/rebalance/queues                                         204
//	GET    /api/queues/quorum/{vhost}/{name}/status                      200
//	POST   /api/queues/quorum/{vhost}/{name}/transfer-leadership {"node"} 204 (Warren's)
//
// Administrators only (the status: any management user), as RabbitMQ. A
// refused change is RabbitMQ's 503 {"error":"service_unavailable",
// "reason":<rabbit_quorum_queue's error atom>}. A change runs on the
// queue's leader: the node asked forwards it there (Cluster.Fetch of the
// same endpoint, which the leader runs as a trusted local request) and
// relays the answer; while the leadership moves it asks again. Unlike
// RabbitMQ (which spawns grow, shrink and rebalance and answers at once),
// the changes are done when the answer comes, so that a client (and
// `warren queues`) sees their outcome; shrink's 202 carries the
// per-queue results as rabbitmq-queues shrink prints them.

func (s *Server) quorumRoutes() {
	s.handle("POST /api/queues/quorum/{vhost}/{name}/replicas/add", lvlAdmin, (*call).qqAddMember)
	s.handle("DELETE /api/queues/quorum/{vhost}/{name}/replicas/delete", lvlAdmin, (*call).qqDeleteMember)
	s.handle("POST /api/queues/quorum/replicas/on/{node}/grow", lvlAdmin, (*call).qqGrow)
	s.handle("DELETE /api/queues/quorum/replicas/on/{node}/shrink", lvlAdmin, (*call).qqShrink)
	s.handle("POST /api/rebalance/queues", lvlAdmin, (*call).qqRebalance)
	s.handle("GET /api/queues/quorum/{vhost}/{name}/status", lvlManagement, (*call).qqStatus)
	// Warren's: move a queue's leader (also rebalance's and member
	// deletion's request to the leader).
	s.handle("POST /api/queues/quorum/{vhost}/{name}/transfer-leadership", lvlAdmin, (*call).qqTransfer)
}

// memberTimeout bounds one membership change, as RabbitMQ's 30 s.
const memberTimeout = 30 * time.Second

// unavailable is RabbitMQ's 503 for a refused membership change.
func unavailable(reason string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Err: "service_unavailable", Reason: reason}
}

// memberFailed maps a broker membership error to its reply.
func memberFailed(err error) *apiError {
	var me *broker.MemberError
	var nl *broker.NotLeaderError
	switch {
	case errors.As(err, &me):
		return unavailable(me.Reason)
	case errors.As(err, &nl):
		return unavailable("not_leader")
	case errors.Is(err, context.DeadlineExceeded):
		return unavailable("timeout")
	case isNoQuorum(err):
		return noQuorum(err)
	}
	return unavailable(err.Error())
}

// qqLookup is resource_exists of the per-queue endpoints: 404 for an
// unknown vhost or queue (or a vhost the user may not see: 401).
func (c *call) qqLookup() (vhost, name string, info broker.QuorumMembership, err error) {
	return c.membersLookup(c.s.b.QuorumMembershipOf)
}

// membersLookup is qqLookup with the membership of another kind (a
// stream's: Broker.StreamMembershipOf).
func (c *call) membersLookup(of func(vhost, name string) (broker.QuorumMembership, error)) (vhost, name string, info broker.QuorumMembership, err error) {
	v, q, err := c.queue()
	if err != nil {
		return "", "", info, err
	}
	info, err = of(v.Name, q.Name)
	return v.Name, q.Name, c.s.shownInfo(info), err
}

// bnode is a node as the broker names it: a single node's own name is "".
func (s *Server) bnode(node string) string {
	if s.cluster() == nil && node == s.node {
		return ""
	}
	return node
}

// shown is a node of the broker's as the API shows it.
func (s *Server) shown(node string) string {
	if node == "" {
		return s.node
	}
	return node
}

func (s *Server) shownInfo(info broker.QuorumMembership) broker.QuorumMembership {
	if s.cluster() != nil {
		return info
	}
	ms := make([]string, len(info.Members))
	for i, m := range info.Members {
		ms[i] = s.shown(m)
	}
	info.Members, info.Leader = ms, s.shown(info.Leader)
	return info
}

// body reads the request body (once) for decoding and forwarding.
func (c *call) body() ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(c.r.Body, 1<<20))
	if err != nil {
		return nil, badRequest("not_json")
	}
	c.r.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// nodeBody decodes {"node": ...}, RabbitMQ's key_missing when absent.
func (c *call) nodeBody() (string, error) {
	var b struct {
		Node *string `json:"node"`
	}
	if err := c.decode(&b); err != nil {
		return "", err
	}
	if b.Node == nil || *b.Node == "" {
		return "", keyMissing("node")
	}
	return *b.Node, nil
}

// running lists the running nodes of the cluster (this node alone when
// it is not clustered).
func (s *Server) running() []string {
	cl := s.cluster()
	if cl == nil {
		return []string{s.node}
	}
	var out []string
	for _, n := range cl.Nodes() {
		if n.Running {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Server) isRunning(node string) bool {
	for _, n := range s.running() {
		if n == node {
			return true
		}
	}
	return false
}

func qqPath(vhost, name string, rest ...string) string {
	p := "/api/queues/quorum/" + url.PathEscape(vhost) + "/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// reply is an answer to relay: a status and its body (nil: none).
type reply struct {
	status int
	body   []byte
}

func errorReply(ae *apiError) reply {
	b, _ := json.Marshal(map[string]any{"error": ae.Err, "reason": ae.Reason})
	return reply{ae.Status, b}
}

// isNotLeader reports a forwarded change answered "not the leader".
func (r reply) isNotLeader() bool {
	if r.status != http.StatusServiceUnavailable {
		return false
	}
	var e struct {
		Reason string `json:"reason"`
	}
	return json.Unmarshal(r.body, &e) == nil && e.Reason == "not_leader"
}

// atLeader runs a change of queue vhost/name where it leads: local (the
// broker's method, which answers *NotLeaderError elsewhere) here, else the
// endpoint path with body on the leader. A request from another node runs
// only here. While the leadership is unknown or moves it tries again,
// within memberTimeout. okStatus is the success status.
func (c *call) atLeader(vhost, name, path string, body []byte, okStatus int,
	local func(ctx context.Context) error) reply {
	ctx, cancel := context.WithTimeout(c.r.Context(), memberTimeout)
	defer cancel()
	for {
		err := local(ctx)
		if err == nil {
			return reply{status: okStatus}
		}
		var nl *broker.NotLeaderError
		if !errors.As(err, &nl) || c.local {
			return errorReply(memberFailed(err))
		}
		cl := c.s.cluster()
		if nl.Leader != "" && nl.Leader != c.s.node && cl != nil {
			fctx, fcancel := context.WithTimeout(ctx, memberTimeout)
			st, rb, ferr := cl.Fetch(fctx, nl.Leader, c.r.Method, path, body)
			fcancel()
			if ferr == nil {
				r := reply{st, rb}
				if !r.isNotLeader() {
					return r
				}
			}
		}
		select {
		case <-ctx.Done():
			return errorReply(unavailable("timeout"))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *call) relay(r reply) error {
	if len(r.body) > 0 {
		c.w.Header().Set("Content-Type", "application/json")
	}
	c.w.WriteHeader(r.status)
	if len(r.body) > 0 {
		c.w.Write(r.body)
	}
	return nil
}

// memberReq is a request to change one member of a quorum queue.
type memberReq struct {
	vhost, name, node string
	info              broker.QuorumMembership
	raw               []byte // the body, to forward to the leader
}

// memberRequest reads a member change's queue and {"node"} body, with
// RabbitMQ's precedence: an unknown queue (404), then a bad body (400),
// then a queue whose membership is unknown (503).
func (c *call) memberRequest() (memberReq, error) {
	return c.memberRequestOf(c.s.b.QuorumMembershipOf)
}

// memberRequestOf is memberRequest with the membership of another kind.
func (c *call) memberRequestOf(of func(vhost, name string) (broker.QuorumMembership, error)) (memberReq, error) {
	vhost, name, info, err := c.membersLookup(of)
	if ae := (*apiError)(nil); errors.As(err, &ae) {
		return memberReq{}, err
	}
	raw, err2 := c.body()
	if err2 != nil {
		return memberReq{}, err2
	}
	node, err2 := c.nodeBody()
	if err2 != nil {
		return memberReq{}, err2
	}
	if err != nil {
		return memberReq{}, memberFailed(err)
	}
	return memberReq{vhost: vhost, name: name, node: node, info: info, raw: raw}, nil
}

// qqAddMember is rabbit_mgmt_wm_quorum_queue_replicas_add_member over
// rabbit_quorum_queue:add_member.
func (c *call) qqAddMember() error {
	r, err := c.memberRequest()
	if err != nil {
		return err
	}
	vhost, name, info, node := r.vhost, r.name, r.info, r.node
	if !c.local && !c.s.isRunning(node) {
		return unavailable("node_not_running")
	}
	for _, m := range info.Members {
		if m == node {
			return c.noContent() // idempotent by design
		}
	}
	return c.relay(c.atLeader(vhost, name, c.escapedPath(), r.raw, http.StatusNoContent, func(ctx context.Context) error {
		return c.s.b.AddQuorumMember(ctx, vhost, name, c.s.bnode(node))
	}))
}

// qqDeleteMember is rabbit_mgmt_wm_quorum_queue_replicas_delete_member:
// 202 Accepted.
func (c *call) qqDeleteMember() error {
	r, err := c.memberRequest()
	if err != nil {
		return err
	}
	vhost, name, node := r.vhost, r.name, r.node
	return c.relay(c.atLeader(vhost, name, c.escapedPath(), r.raw, http.StatusAccepted, func(ctx context.Context) error {
		return c.s.b.DeleteQuorumMember(ctx, vhost, name, c.s.bnode(node))
	}))
}

// qqTransfer moves a queue's leadership to {"node"}, a running member
// (Warren's extension, for administrators: the web UI's cluster page).
// The change runs where the queue leads: another node's request runs only
// here (rebalance, and deleting the leader's member, ask the leader with
// it); a client's is forwarded there.
func (c *call) qqTransfer() error {
	r, err := c.memberRequest()
	if err != nil {
		return err
	}
	vhost, name, info, node := r.vhost, r.name, r.info, r.node
	if !c.local {
		if !slices.Contains(info.Members, node) {
			return badRequest(fmt.Sprintf("%s is not a member of queue '%s' in vhost '%s'", node, name, vhost))
		}
		if !c.s.isRunning(node) {
			return unavailable("node_not_running")
		}
		if info.Leader == node {
			return c.noContent()
		}
	}
	return c.relay(c.atLeader(vhost, name, c.escapedPath(), r.raw, http.StatusNoContent, func(ctx context.Context) error {
		return c.s.b.TransferQuorumLeader(ctx, vhost, name, c.s.bnode(node))
	}))
}

// memberChange runs one queue's add (or delete) for grow (shrink) where
// the queue leads, as the per-queue endpoint would.
func (c *call) memberChange(info broker.QuorumMembership, node string, add bool) reply {
	body, _ := json.Marshal(map[string]string{"node": node})
	path, method, ok := qqPath(info.VHost, info.Name, "replicas", "add"), http.MethodPost, http.StatusNoContent
	if !add {
		path, method, ok = qqPath(info.VHost, info.Name, "replicas", "delete"), http.MethodDelete, http.StatusAccepted
	}
	sub := *c
	r2 := c.r.Clone(c.r.Context())
	r2.Method = method
	sub.r = r2
	return sub.atLeader(info.VHost, info.Name, path, body, ok, func(ctx context.Context) error {
		if add {
			return c.s.b.AddQuorumMember(ctx, info.VHost, info.Name, c.s.bnode(node))
		}
		return c.s.b.DeleteQuorumMember(ctx, info.VHost, info.Name, c.s.bnode(node))
	})
}

// replyReason is the reason of an error reply ("" for none).
func (r reply) reason() string {
	var e struct {
		Reason any `json:"reason"`
	}
	if json.Unmarshal(r.body, &e) == nil {
		if s, ok := e.Reason.(string); ok {
			return s
		}
	}
	return http.StatusText(r.status)
}

// qqGrow is rabbit_mgmt_wm_quorum_queue_replicas_grow over
// rabbit_quorum_queue:grow/4: 404 when node is not running; the three
// body keys are required.
func (c *call) qqGrow() error {
	node := c.pv("node")
	if !c.s.isRunning(node) {
		return errNotFound
	}
	var b struct {
		VHostPattern *string `json:"vhost_pattern"`
		QueuePattern *string `json:"queue_pattern"`
		Strategy     *string `json:"strategy"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	if err := firstMissing([]string{"vhost_pattern", "queue_pattern", "strategy"}, b.VHostPattern, b.QueuePattern, b.Strategy); err != nil {
		return err
	}
	targets, err := c.s.b.GrowTargets(c.s.bnode(node), *b.VHostPattern, *b.QueuePattern, *b.Strategy)
	if err != nil {
		return badRequest(err.Error())
	}
	for _, info := range targets {
		if r := c.memberChange(info, node, true); r.status >= 300 {
			c.s.log.Warn("quorum queue grow: adding a member failed", "vhost", info.VHost, "queue", info.Name,
				"node", node, "status", r.status, "reason", r.reason())
		}
	}
	return c.noContent()
}

// qqShrink is rabbit_mgmt_wm_quorum_queue_replicas_shrink over
// rabbit_quorum_queue:shrink_all/1: 202, whatever the node.
func (c *call) qqShrink() error {
	node := c.pv("node")
	results := []api.QueueMemberResult{}
	for _, info := range c.s.b.ShrinkTargets(c.s.bnode(node)) {
		res := api.QueueMemberResult{VHost: info.VHost, Name: info.Name}
		if r := c.memberChange(info, node, false); r.status < 300 {
			res.Size, res.Result = len(info.Members)-1, "ok"
		} else {
			reason := r.reason()
			if reason == "last_node" {
				reason = "the last node cannot be removed"
			}
			res.Size, res.Result = len(info.Members), "error: "+reason
			c.s.log.Warn("quorum queue shrink: deleting a member failed", "vhost", info.VHost, "queue", info.Name,
				"node", node, "status", r.status, "reason", reason)
		}
		results = append(results, res)
	}
	c.s.writeJSON(c.w, http.StatusAccepted, results)
	return nil
}

// rebalancing holds a *sync.Mutex per Server: one rebalance at a time on
// a node, as RabbitMQ's global rebalance lock.
var rebalancing sync.Map

// qqRebalance is rabbit_mgmt_wm_rebalance_queues over
// rabbit_amqqueue:rebalance(all, ".*", ".*"); Warren takes optional
// vhost_pattern and queue_pattern keys.
func (c *call) qqRebalance() error {
	b := struct {
		VHostPattern string `json:"vhost_pattern"`
		QueuePattern string `json:"queue_pattern"`
	}{".*", ".*"}
	if err := c.decode(&b); err != nil {
		return err
	}
	mu, _ := rebalancing.LoadOrStore(c.s, new(sync.Mutex))
	if !mu.(*sync.Mutex).TryLock() {
		return badRequest("rebalance_in_progress")
	}
	defer mu.(*sync.Mutex).Unlock()
	c.s.log.Info("queue rebalance started", "user", c.user.Name)
	moves, err := broker.RebalancePlan(c.s.b.QuorumMemberships(), c.s.running(), b.VHostPattern, b.QueuePattern)
	if err != nil {
		return badRequest(err.Error())
	}
	for _, m := range moves {
		body, _ := json.Marshal(map[string]string{"node": m.To})
		sub := *c
		r2 := c.r.Clone(c.r.Context())
		r2.Method = http.MethodPost
		sub.r = r2
		r := sub.atLeader(m.VHost, m.Name, qqPath(m.VHost, m.Name, "transfer-leadership"), body, http.StatusNoContent,
			func(ctx context.Context) error { return c.s.b.TransferQuorumLeader(ctx, m.VHost, m.Name, m.To) })
		if r.status >= 300 {
			c.s.log.Warn("queue rebalance: moving a leader failed", "vhost", m.VHost, "queue", m.Name,
				"from", m.From, "to", m.To, "reason", r.reason())
		}
	}
	c.s.log.Info("queue rebalance finished", "moves", len(moves))
	return c.noContent()
}

// statusRow is one member of the quorum status: RabbitMQ 4.x's keys, and
// Warren's log size.
func (s *Server) statusRow(st broker.QuorumMemberStatus) api.QuorumMember {
	return api.QuorumMember{
		Node: s.shown(st.Node), RaftState: st.RaftState, Membership: st.Membership,
		LastLogIndex: st.LastLogIndex, LastWritten: st.LastWritten, LastApplied: st.LastApplied,
		CommitIndex: st.CommitIndex, SnapshotIndex: st.SnapshotIndex, Term: st.Term,
		MachineVersion: st.MachineVersion, LogBytes: st.LogBytes, LogEntries: st.LogEntries,
	}
}

// qqStatus is rabbit_mgmt_wm_quorum_queue_status over
// rabbit_quorum_queue:status/2: one row per member, by node name; a queue
// that is not a quorum queue is RabbitMQ's 503 {"status":"failed",
// "reason":...}. A member's row comes from its node (a down node's row
// says nodedown).
func (c *call) qqStatus() error {
	// RabbitMQ asks only for a management user here
	// (rabbit_mgmt_util:is_authorized), not for access to the vhost.
	v := c.s.b.VHost(c.pv("vhost"))
	if v == nil || v.Queue(c.pv("name")) == nil {
		return errNotFound
	}
	vhost, name := v.Name, c.pv("name")
	info, err := c.s.b.QuorumMembershipOf(vhost, name)
	info = c.s.shownInfo(info)
	if err != nil {
		var me *broker.MemberError
		if errors.As(err, &me) {
			c.s.writeJSON(c.w, http.StatusServiceUnavailable, map[string]any{"status": "failed", "reason": me.Reason})
			return nil
		}
		return err
	}
	own := func() (api.QuorumMember, error) {
		st, err := c.s.b.QuorumLocalStatus(vhost, name)
		if err != nil {
			return api.QuorumMember{}, err
		}
		return c.s.statusRow(st), nil
	}
	rows := []api.QuorumMember{}
	if c.local || c.s.cluster() == nil {
		row, err := own()
		if err != nil {
			return memberFailed(err)
		}
		return c.ok(append(rows, row))
	}
	members := append([]string(nil), info.Members...)
	sort.Strings(members)
	out := make([]api.QuorumMember, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m == c.s.node {
			row, err := own()
			if err != nil {
				return memberFailed(err)
			}
			out[i] = row
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			down := c.s.statusRow(broker.QuorumMemberStatus{Node: m, RaftState: "nodedown"})
			ctx, cancel := context.WithTimeout(c.r.Context(), fetchTimeout)
			defer cancel()
			st, body, err := c.s.cluster().Fetch(ctx, m, http.MethodGet, qqPath(vhost, name, "status"), nil)
			var l []api.QuorumMember
			if err != nil || st != http.StatusOK || json.Unmarshal(body, &l) != nil || len(l) != 1 {
				out[i] = down
				return
			}
			out[i] = l[0]
		}()
	}
	wg.Wait()
	return c.ok(append(rows, out...))
}
