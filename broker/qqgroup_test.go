package broker

import (
	"context"
	"slices"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// stubHost is a QuorumHost that records the groups started and deleted.
type stubHost struct {
	started, deleted []uint64
}

func (h *stubHost) StartGroup(id uint64, members []string, sm QuorumSM, join bool) (QuorumGroup, error) {
	h.started = append(h.started, id)
	return stubGroup{}, nil
}
func (h *stubHost) StopGroup(uint64)              {}
func (h *stubHost) DeleteGroup(id uint64)         { h.deleted = append(h.deleted, id) }
func (h *stubHost) Announce(string, []byte) error { return nil }

type stubGroup struct{}

func (stubGroup) Propose(data []byte, done func(uint64, error)) { done(0, context.Canceled) }
func (stubGroup) ReadEntry(uint64) ([]byte, error)              { return nil, context.Canceled }
func (stubGroup) Leader() (string, uint64)                      { return "", 0 }
func (stubGroup) Status() QuorumStatus                          { return QuorumStatus{} }
func (stubGroup) AddMember(context.Context, string) error       { return nil }
func (stubGroup) RemoveMember(context.Context, string) error    { return nil }
func (stubGroup) TransferLeader(context.Context, string) error  { return nil }
func (stubGroup) Campaign() error                               { return nil }

func (stubGroup) ReadEntries([]uint64, func(uint64, []byte) error) error { return context.Canceled }

// issue 14: a new quorum queue's members are the preferred leader, the
// declaring node, then the nodes with the fewest quorum members (ties by
// name), x-quorum-initial-group-size of them (default 3, at most the
// cluster); none on a single node or without a raft host; the member
// nodes start their group at the declare and delete it with the queue.
func TestQuorumMembersChoice(t *testing.T) {
	if ms := New(Config{}).quorumMembers(QueueSpec{Name: "q", Args: amqp.Table{"x-queue-type": "quorum"}}); ms != nil {
		t.Fatalf("single node: members %v", ms)
	}
	b := New(Config{Node: "n3"})
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	b.SetNodes(func() []string { return nodes })
	quorum := amqp.Table{"x-queue-type": "quorum"}
	if ms := b.quorumMembers(QueueSpec{Name: "q", Args: quorum}); ms != nil {
		t.Fatalf("no raft host: members %v", ms)
	}
	h := &stubHost{}
	b.SetQuorumHost(h)
	if ms := b.quorumMembers(QueueSpec{Name: "q", Args: amqp.Table{}}); ms != nil {
		t.Fatalf("classic queue: members %v", ms)
	}
	v := b.VHost("/")
	declare := func(name string, members []string, group uint64) {
		t.Helper()
		if _, _, _, err := v.declareQueueLocal(QueueSpec{Name: name, Durable: true, Args: quorum, Members: members,
			Group: group, newGroup: true}, false); err != nil {
			t.Fatal(err)
		}
	}
	ms := b.quorumMembers(QueueSpec{Name: "a", Args: quorum, Home: "n3"})
	if !slices.Equal(ms, []string{"n3", "n1", "n2"}) {
		t.Fatalf("first queue: %v", ms)
	}
	declare("a", ms, 10)
	// n1 and n2 have one member each now: n4 and n5 come first.
	ms = b.quorumMembers(QueueSpec{Name: "b", Args: quorum, Home: "n2"})
	if !slices.Equal(ms, []string{"n2", "n3", "n4"}) {
		t.Fatalf("second queue: %v", ms)
	}
	declare("b", ms, 11)
	ms = b.quorumMembers(QueueSpec{Name: "c", Args: amqp.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": int32(9)}, Home: "n3"})
	if len(ms) != 5 || ms[0] != "n3" {
		t.Fatalf("group size 9 on 5 nodes: %v", ms)
	}
	ms = b.quorumMembers(QueueSpec{Name: "d", Args: amqp.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": int32(1)}, Home: "n3"})
	if !slices.Equal(ms, []string{"n3"}) {
		t.Fatalf("group size 1: %v", ms)
	}
	declare("e", []string{"n1", "n2", "n4"}, 12) // this node (n3) is no member
	if !slices.Equal(h.started, []uint64{10, 11}) {
		t.Fatalf("groups started here: %v, want 10 and 11", h.started)
	}
	if _, err := v.DeleteQueue("a", 0, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := v.DeleteQueue("e", 0, false, false); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.deleted, []uint64{10}) {
		t.Fatalf("groups deleted here: %v, want 10", h.deleted)
	}
	// The snapshot and the durable record carry the group.
	for _, sq := range b.snapshot().Queues {
		if sq.Name == "b" && (sq.Group != 11 || !slices.Equal(sq.Members, []string{"n2", "n3", "n4"})) {
			t.Fatalf("snapshot: %+v", sq)
		}
	}
	if q := v.Queue("b"); q == nil || q.HomeNode() != "" || q.ServedHere() {
		t.Fatalf("b before a leader is known: home %q local %v", q.HomeNode(), q.ServedHere())
	}
}
