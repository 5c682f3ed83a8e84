package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

// A cluster-aware management API (issue 13). Without SetCluster (a single
// node) nothing here runs and every endpoint is exactly today's.
//
// With a Cluster, the lists RabbitMQ's API shows cluster-wide (overview,
// nodes, connections, channels, consumers, queues) are gathered from every
// running member: the node asked (the "first" node) authenticates the user,
// runs the same path on every other member through Cluster.Fetch, which
// runs it there with ServeLocal, merges the replies with its own, filters
// them by what the user may see, and only then sorts, filters by name,
// projects columns and pages (list). A request run by ServeLocal is
// trusted (it came over the authenticated inter-node link, never from the
// HTTP port: the mark is a context value no HTTP request can carry),
// answers with the node's own objects only (queues homed on it, its own
// connections and channels) and never asks other nodes in turn, so there
// is no fan-out loop. It runs with an administrator's view; the first
// node's filtering (vhost access, non-monitoring users see their own
// connections and channels only) is what the user gets.

// NodeInfo is one member of the cluster as the glue knows it.
type NodeInfo struct {
	Name    string // "warren@host"
	Address string // its inter-node address
	Running bool   // reachable from this node (this node itself: true)
	Leader  bool   // it leads the metadata group
}

// ClusterStatus is the metadata group's state as this node sees it.
// QuorumStatser is implemented by a Cluster whose node runs the raft host
// of replicated quorum queues (issue 14): its counters (fsyncs of the
// shared log, groups, quiesced groups...), which /api/nodes shows as the
// node's quorum_queues_raft.
type QuorumStatser interface {
	QuorumStats() map[string]any
}

type ClusterStatus struct {
	ID     string // the cluster id ("" until known)
	Leader string // the metadata group's leader ("" when there is none)
}

// Cluster is what the management API needs of the cluster (implemented by
// the glue in package cluster over the inter-node transport and the
// metadata group).
type Cluster interface {
	// Self is this node's name (the broker's Config.Node).
	Self() string
	// Nodes lists every member, this node included.
	Nodes() []NodeInfo
	// Status is the metadata group's id and leader.
	Status() ClusterStatus
	// Fetch runs a request on node's management API as a trusted,
	// local-only request: the other node's (*Server).ServeLocal(method,
	// path, body). path is escaped and carries no query.
	Fetch(ctx context.Context, node, method, path string, body []byte) (status int, resp []byte, err error)
	// AddMember adds a node to the cluster (warren cluster join on the
	// node's side); RemoveMember removes one (warren cluster forget;
	// offline: it is gone for good). Both check first and refuse a change
	// that would hurt (a node that does not answer, a running node, too
	// few members left running): their error answers 400. An error
	// wrapping broker.ErrNoQuorum answers 503.
	AddMember(ctx context.Context, name, addr string) error
	RemoveMember(ctx context.Context, name string, offline bool) error
}

// isNoQuorum reports a change the cluster could not commit.
func isNoQuorum(err error) bool { return errors.Is(err, broker.ErrNoQuorum) }

// noQuorum is the 503 for a change the metadata group could not commit:
// the broker's reason ("cluster has no quorum: declare of queue 'q' in
// vhost '/' not applied (...)"), or the cluster's error text.
func noQuorum(err error) *apiError {
	reason := err.Error()
	var qe *broker.QuorumError
	if errors.As(err, &qe) {
		reason = qe.Reason
	}
	if !strings.HasPrefix(reason, "cluster has no quorum") {
		reason = "cluster has no quorum: " + reason
	}
	return &apiError{Status: http.StatusServiceUnavailable, Err: "unavailable", Reason: reason}
}

// fetchTimeout bounds a request to another node.
const fetchTimeout = 5 * time.Second

// SetCluster makes the API cluster-wide over c. Call it once, before
// serving requests that should see the cluster.
func (s *Server) SetCluster(c Cluster) {
	if c == nil {
		s.cl.Store(nil)
		return
	}
	if c.Self() != s.node {
		s.log.Warn("management API: the cluster's node name differs from the broker's", "cluster", c.Self(), "broker", s.node)
	}
	s.cl.Store(&c)
}

func (s *Server) cluster() Cluster {
	if p := s.cl.Load(); p != nil {
		return *p
	}
	return nil
}

type localKey struct{}

// internalUser is the user a ServeLocal request runs as: it sees
// everything; the node that asked filters the reply.
var internalUser = &broker.User{Name: "", Tags: []string{"administrator"}}

// ServeLocal runs a request from another node of the cluster (what
// Cluster.Fetch runs there): trusted, without credentials, answered with
// this node's own objects only. path is an escaped path ("/api/queues/%2F").
func (s *Server) ServeLocal(method, path string, body []byte) (int, []byte) {
	u, err := url.Parse(path)
	if err != nil {
		return http.StatusBadRequest, []byte(`{"error":"bad_request","reason":"bad path"}` + "\n")
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), localKey{}, true), fetchTimeout)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, method, "http://local", bytes.NewReader(body))
	if err != nil {
		return http.StatusBadRequest, []byte(`{"error":"bad_request","reason":"bad request"}` + "\n")
	}
	r.URL.Path, r.URL.RawPath, r.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	r.RequestURI = path
	r.RemoteAddr = "127.0.0.1:0"
	rec := &recorder{h: http.Header{}}
	s.serveHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.status, rec.b.Bytes()
}

func isLocalRequest(r *http.Request) bool {
	v, _ := r.Context().Value(localKey{}).(bool)
	return v
}

// recorder is the ResponseWriter of a ServeLocal request.
type recorder struct {
	h      http.Header
	status int
	b      bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(st int) {
	if r.status == 0 {
		r.status = st
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.b.Write(p)
}

// clustered reports whether this request gathers from the other nodes:
// the node has a cluster and the request is not itself another node's.
func (c *call) clustered() bool { return !c.local && c.s.cluster() != nil }

// escapedPath is the request's path as the client sent it (serveHTTP
// rewrote escaped slashes), for asking other nodes the same.
func (c *call) escapedPath() string {
	segs := strings.Split(c.r.URL.Path, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(strings.ReplaceAll(seg, slashMark, "/"))
	}
	return strings.Join(segs, "/")
}

// nodeReply is one node's answer to a fan-out.
type nodeReply struct {
	node   string
	status int
	body   []byte
	err    error
}

// others lists the other members, running or not.
func (s *Server) others() []NodeInfo {
	cl := s.cluster()
	if cl == nil {
		return nil
	}
	var out []NodeInfo
	for _, n := range cl.Nodes() {
		if n.Name != s.node {
			out = append(out, n)
		}
	}
	return out
}

// fanOut runs method path on every other running member, in parallel, and
// returns the replies in member order. A member not running is not asked
// (its reply has err set).
func (c *call) fanOut(method, path string, body []byte) []nodeReply {
	cl := c.s.cluster()
	nodes := c.s.others()
	out := make([]nodeReply, len(nodes))
	ctx, cancel := context.WithTimeout(c.r.Context(), fetchTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range nodes {
		out[i].node = n.Name
		if !n.Running {
			out[i].err = errors.New("node down")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].status, out[i].body, out[i].err = cl.Fetch(ctx, n.Name, method, path, body)
		}()
	}
	wg.Wait()
	return out
}

// ok200 reports whether a reply answered 200.
func (r nodeReply) ok200() bool { return r.err == nil && r.status == http.StatusOK }

// remoteListOf returns the items the other nodes list for this path
// (their replies that answered 200), and which nodes answered.
func remoteListOf[T any](c *call) ([]T, map[string]bool) {
	var items []T
	answered := map[string]bool{}
	// The range parameters go along: each node serves its objects'
	// history (issue 15).
	for _, r := range c.fanOut(http.MethodGet, c.escapedPath()+c.rangeQuery(), nil) {
		if !r.ok200() {
			if r.err == nil && r.status != http.StatusNotFound {
				c.s.log.Warn("management API: a node's list failed", "node", r.node, "path", c.r.URL.Path, "status", r.status)
			}
			continue
		}
		var l []T
		if err := json.Unmarshal(r.body, &l); err != nil {
			c.s.log.Warn("management API: a node's list is not JSON", "node", r.node, "err", err)
			continue
		}
		answered[r.node] = true
		items = append(items, l...)
	}
	return items, answered
}

// remoteItemOf asks the other nodes for the object at path and returns
// the first 200 answer, decoded, with the node that gave it.
func remoteItemOf[T any](c *call, path string) (string, T, bool) {
	for _, r := range c.fanOut(http.MethodGet, path, nil) {
		if r.ok200() {
			var m T
			if json.Unmarshal(r.body, &m) == nil {
				return r.node, m, true
			}
		}
	}
	var zero T
	return "", zero, false
}

// clusterName is the cluster's name: the node's own on a single node; in
// a cluster the least member name, the same on every node whichever
// answers.
func (s *Server) clusterName() string {
	cl := s.cluster()
	if cl == nil {
		return s.b.ClusterName()
	}
	name := s.node
	for _, n := range cl.Nodes() {
		if n.Name < name {
			name = n.Name
		}
	}
	return name
}

func str(v any) string { s, _ := v.(string); return s }

// The cluster endpoints used by `warren cluster` (administrators only).
func (s *Server) clusterRoutes() {
	s.handle("GET /api/cluster-status", lvlAdmin, (*call).clusterStatus)
	s.handle("POST /api/cluster/members", lvlAdmin, (*call).clusterAdd)
	s.handle("DELETE /api/cluster/members/{name}", lvlAdmin, (*call).clusterRemove)
}

func (c *call) clusterStatus() error {
	cl := c.s.cluster()
	if cl == nil {
		return c.ok(api.ClusterStatus{Node: c.s.node, ClusterName: c.s.clusterName(), Leader: c.s.node,
			Members: []api.ClusterMember{{Name: c.s.node, Running: true, Leader: true}}})
	}
	st := cl.Status()
	nodes := cl.Nodes()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	members := []api.ClusterMember{}
	for _, n := range nodes {
		members = append(members, api.ClusterMember{Name: n.Name, Address: n.Address, Running: n.Running, Leader: n.Leader})
	}
	return c.ok(api.ClusterStatus{Node: c.s.node, ClusterName: c.s.clusterName(), ClusterID: st.ID, Leader: st.Leader,
		Members: members})
}

var errNotClustered = badRequest("this node is not a cluster member (no cluster configured)")

func (c *call) clusterAdd() error {
	var b struct {
		Name    *string `json:"name"`
		Address *string `json:"address"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	if err := firstMissing([]string{"name", "address"}, b.Name, b.Address); err != nil {
		return err
	}
	if *b.Name == "" || *b.Address == "" {
		return badRequest("name and address must not be empty")
	}
	cl := c.s.cluster()
	if cl == nil {
		return errNotClustered
	}
	if err := cl.AddMember(c.r.Context(), *b.Name, *b.Address); err != nil {
		return clusterError(err)
	}
	return c.noContent()
}

func (c *call) clusterRemove() error {
	cl := c.s.cluster()
	if cl == nil {
		return errNotClustered
	}
	name := c.pv("name")
	known := false
	for _, n := range cl.Nodes() {
		known = known || n.Name == name
	}
	if !known {
		return errNotFound
	}
	offline := false
	switch v := c.r.URL.Query().Get("offline"); v {
	case "", "false":
	case "true":
		offline = true
	default:
		return badRequest(fmt.Sprintf("offline: want true or false, got %q", v))
	}
	if err := cl.RemoveMember(c.r.Context(), name, offline); err != nil {
		return clusterError(err)
	}
	return c.noContent()
}

// clusterError maps a membership change's failure: 503 without a quorum,
// 400 with the reason otherwise.
func clusterError(err error) error {
	if isNoQuorum(err) {
		return noQuorum(err)
	}
	return badRequest(err.Error())
}

// changeFailed is the reply to a change the broker refused: RabbitMQ's
// 400 with the reason, or 503 when the cluster has no quorum to commit it.
func changeFailed(err error) *apiError {
	if isNoQuorum(err) {
		return noQuorum(err)
	}
	return badRequest(err.Error())
}
