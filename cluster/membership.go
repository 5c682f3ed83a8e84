package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warrenmq/warren/cluster/meta"
	"github.com/warrenmq/warren/store"
)

// Membership as a careful operator expects it (issue 22), after RabbitMQ's
// join_cluster and forget_cluster_node and etcd's strict reconfiguration:
//
//   - A node is added only once it has answered on the address given, as
//     the name given, with the secret, empty and waiting to join
//     (--cluster-join). A typo (a bogus name, an address where nothing
//     listens or something else answers) is refused and changes nothing.
//   - No change may leave fewer running members than a quorum of the new
//     membership.
//   - A running node is never forgotten; a stopped one only with
//     --offline, which says that it is gone for good.
//
// A member whose data directory was lost is a new node: Raft forbids it
// to rejoin under its old identity with an empty log (the leader would
// take its log for what it acknowledged, and etcd's raft panics on it).
// Each data directory has a random incarnation, and every node remembers
// the incarnation of each member it has linked with: a member that
// comes back with another one is refused, on either side of the link,
// with the recovery spelled out, and a blank node that finds itself
// refused so at start-up refuses to start.

// ErrRefused wraps a membership change refused by the checks above (the
// management API answers it 400 with the reason).
var ErrRefused = errors.New("refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// ValidNodeName checks a node name: name@host, of letters, digits and
// '.', '-', '_' only, at most 255 bytes (so that it fits the handshake,
// a URL path segment and a log line as it is).
func ValidNodeName(name string) error {
	n, h, ok := strings.Cut(name, "@")
	if !ok || n == "" || h == "" || strings.Contains(h, "@") || len(name) > 255 {
		return fmt.Errorf("node name %q: want name@host (as warren@host1)", name)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_', r == '@':
		default:
			return fmt.Errorf("node name %q: only letters, digits, '.', '-' and '_' may stand on either side of the '@'", name)
		}
	}
	return nil
}

// ValidAddr checks an inter-node address: host:port with a port number.
func ValidAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %v (want HOST:PORT)", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("address %q: port %q is not a number from 1 to 65535", addr, port)
	}
	if host == "" {
		return fmt.Errorf("address %q: no host", addr)
	}
	return nil
}

// probeInfo is what a node answers a transport.Probe with.
type probeInfo struct {
	Name      string `json:"name"`
	ClusterID string `json:"cluster_id"`
	// Waiting: started with --cluster-join and not a member yet.
	Waiting bool `json:"waiting_to_join"`
	// Refused is set when this node would refuse the prober's
	// incarnation (it lost its data): the reason.
	Refused string `json:"refused,omitempty"`
	// Incarnation is the node's own (hex); inc the same, parsed (probe).
	Incarnation string `json:"incarnation"`
	inc         uint64
}

// probeTimeout bounds a membership change's probe; startProbeTimeout the
// start-up check's (the link refusal is what keeps a node that lost its
// data out; the check only says so early).
const (
	probeTimeout      = 3 * time.Second
	startProbeTimeout = 2 * time.Second
)

// incarnations keeps this node's incarnation and the ones it has seen of
// the other members, in the data directory.
type incarnations struct {
	dir  string
	self uint64

	mu    sync.Mutex
	peers map[string]uint64
}

const (
	incarnationFile = "incarnation"
	peerIncFile     = "peer-incarnations.json"
)

// openIncarnations reads (or, in a new data directory, makes) the
// incarnation and the members' ones.
func openIncarnations(dir string) (*incarnations, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	inc := &incarnations{dir: dir, peers: map[string]uint64{}}
	b, err := os.ReadFile(filepath.Join(dir, incarnationFile))
	switch {
	case err == nil:
		v, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
		if perr != nil || v == 0 {
			return nil, fmt.Errorf("%s: not an incarnation: %q", filepath.Join(dir, incarnationFile), b)
		}
		inc.self = v
	case errors.Is(err, os.ErrNotExist):
		var r [8]byte
		for inc.self == 0 {
			rand.Read(r[:])
			inc.self = binary.BigEndian.Uint64(r[:])
		}
		if err := writeFileSync(filepath.Join(dir, incarnationFile), []byte(strconv.FormatUint(inc.self, 16)+"\n")); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, peerIncFile)); err == nil {
		var m map[string]string
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, peerIncFile), err)
		}
		for name, v := range m {
			if n, err := strconv.ParseUint(v, 16, 64); err == nil {
				inc.peers[name] = n
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return inc, nil
}

// writeFileSync writes a file whole and durably (temp file, fsync, rename,
// fsync of the directory).
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return store.OSFS{}.SyncDir(filepath.Dir(path))
}

func (in *incarnations) saveLocked() error {
	m := make(map[string]string, len(in.peers))
	for name, v := range in.peers {
		m[name] = strconv.FormatUint(v, 16)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	return writeFileSync(filepath.Join(in.dir, peerIncFile), b)
}

// verdict says whether a peer's incarnation is the one this node knows
// (record: remember a peer seen for the first time).
func (in *incarnations) verdict(name string, inc uint64, record bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	known, ok := in.peers[name]
	if ok && known == inc {
		return nil
	}
	if ok {
		return fmt.Errorf("node %s came back with another data directory (incarnation %x, known as %x): "+
			"it lost its Raft state and may not rejoin as the member it was. To bring it back: on a running node "+
			"run 'warren cluster forget --offline %s', then start it with an empty data directory and --cluster-join, "+
			"and run 'warren cluster join %s HOST:PORT'", name, inc, known, name, name)
	}
	if record && inc != 0 {
		in.peers[name] = inc
		if err := in.saveLocked(); err != nil {
			delete(in.peers, name)
			return fmt.Errorf("recording the incarnation of %s: %w", name, err)
		}
	}
	return nil
}

// forget drops a removed member's incarnation: it may come back as new.
func (in *incarnations) forget(name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.peers[name]; ok {
		delete(in.peers, name)
		in.saveLocked()
	}
}

// probeInfo answers a probe from name (incarnation inc).
func (n *Node) probeInfo(name string, inc uint64) []byte {
	pi := probeInfo{Name: n.cfg.Node, ClusterID: n.clusterID(), Incarnation: strconv.FormatUint(n.inc.self, 16)}
	if g := n.group(); g != nil {
		pi.Waiting = n.cfg.Join && !isVoter(g.Members(), n.cfg.Node)
	}
	if err := n.inc.verdict(name, inc, false); err != nil {
		pi.Refused = err.Error()
	}
	b, _ := json.Marshal(pi)
	return b
}

func isVoter(ms []meta.Member, name string) bool {
	for _, m := range ms {
		if m.Name == name && m.Voter {
			return true
		}
	}
	return false
}

// probe asks the node at addr, named name, how it is.
func (n *Node) probe(ctx context.Context, name, addr string) (probeInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	b, err := n.tr.Probe(ctx, name, addr)
	if err != nil {
		return probeInfo{}, err
	}
	var pi probeInfo
	if err := json.Unmarshal(b, &pi); err != nil {
		return probeInfo{}, fmt.Errorf("bad probe answer from %s: %w", name, err)
	}
	pi.inc, _ = strconv.ParseUint(pi.Incarnation, 16, 64)
	return pi, nil
}

// checkLostData runs at the start of a node whose data directory is new
// and that would form a cluster from its peer list: if a peer knows this
// node under another incarnation, its data was lost, and it must not
// start as the member it was.
func (n *Node) checkLostData(peers map[string]string) error {
	type answer struct {
		name string
		pi   probeInfo
		err  error
	}
	ch := make(chan answer, len(peers))
	for name, addr := range peers {
		if name == n.cfg.Node {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), startProbeTimeout)
			defer cancel()
			pi, err := n.probe(ctx, name, addr)
			ch <- answer{name, pi, err}
		}()
	}
	for name := range peers {
		if name == n.cfg.Node {
			continue
		}
		a := <-ch
		if a.err == nil && a.pi.Refused != "" {
			return fmt.Errorf("this node's data directory %s is new, but %s knows it from an earlier one: %s",
				n.cfg.DataDir, a.name, a.pi.Refused)
		}
	}
	return nil
}

// runningVoters counts the voters this node can reach, itself included.
func (n *Node) runningVoters(ms []meta.Member) (voters, running int) {
	for _, m := range ms {
		if !m.Voter {
			continue
		}
		voters++
		if m.Name == n.cfg.Node || n.tr.Up(m.Name) {
			running++
		}
	}
	return voters, running
}

func quorumOf(voters int) int { return voters/2 + 1 }

// addMember is warren cluster join: checked, then proposed.
func (n *Node) addMember(ctx context.Context, name, addr string) error {
	if err := ValidNodeName(name); err != nil {
		return refused("%v", err)
	}
	if err := ValidAddr(addr); err != nil {
		return refused("%v", err)
	}
	g := n.group()
	ms := g.Members()
	var cur *meta.Member
	for i := range ms {
		if ms[i].Name == name && ms[i].Voter {
			cur = &ms[i]
		}
	}
	if name == n.cfg.Node {
		if cur != nil && cur.Addr == addr {
			return nil
		}
		return refused("%s is the node you are asking; its address is changed with --cluster-advertise", name)
	}
	if cur == nil {
		// What this node recorded of a non-member of that name (an old
		// node that dialed in after it was forgotten) is stale: the new
		// member is the one that answers the probe.
		n.inc.forget(name)
	}
	pi, err := n.probe(ctx, name, addr)
	if err != nil {
		if cur != nil && cur.Addr == addr {
			return nil // a member already, as given: nothing to change
		}
		return refused("node %s did not answer at %s as a Warren node with this cluster's secret: %v", name, addr, err)
	}
	if cur != nil {
		if err := n.inc.verdict(name, pi.inc, false); err != nil {
			return refused("%v", err)
		}
		if cur.Addr == addr {
			return nil
		}
	}
	if pi.ClusterID != "" && pi.ClusterID != n.clusterID() {
		return refused("node %s at %s belongs to another cluster (%s)", name, addr, pi.ClusterID)
	}
	if cur != nil {
		// A new address for a member: it must be that member, running.
		if pi.Waiting {
			return refused("node %s at %s is waiting to join, not the member %s at %s", name, addr, name, cur.Addr)
		}
		return quorum(g.AddMember(ctx, name, addr))
	}
	if !pi.Waiting {
		return refused("node %s at %s is not waiting to join: start it with an empty data directory and --cluster-join", name, addr)
	}
	voters, running := n.runningVoters(ms)
	if running+1 < quorumOf(voters+1) {
		return refused("adding %s would make %d members with only %d running, fewer than a quorum (%d)",
			name, voters+1, running+1, quorumOf(voters+1))
	}
	return quorum(g.AddMemberInc(ctx, name, addr, pi.inc))
}

// removeMember is warren cluster forget: never a running node, a stopped
// one only when offline says it is gone for good.
func (n *Node) removeMember(ctx context.Context, name string, offline bool) error {
	g := n.group()
	ms := g.Members()
	if !isVoter(ms, name) {
		return fmt.Errorf("meta: %s is not a member", name)
	}
	if name == n.cfg.Node {
		return refused("%s is the node you are asking: stop it and forget it from another node", name)
	}
	if n.tr.Up(name) {
		return refused("node %s is running: stop it before forgetting it", name)
	}
	if !offline {
		return refused("node %s is stopped but may come back; if it is gone for good (its disk or its host lost), "+
			"forget it with --offline", name)
	}
	voters, running := n.runningVoters(ms)
	if running < quorumOf(voters-1) {
		return refused("forgetting %s would leave %d of %d members running, fewer than a quorum (%d)",
			name, running, voters-1, quorumOf(voters-1))
	}
	return quorum(g.RemoveMember(ctx, name))
}
