package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/loopnet"
)

var clusterNames = []string{"warren@a", "warren@b", "warren@c"}

// newCluster opens three brokers (each with its own data directory and
// node name) joined by a loopback replicator.
func newCluster(t *testing.T, place func(vhost, name string) string) (*loopnet.Repl, []*Broker) {
	t.Helper()
	return newClusterOn(t, place, true)
}

// newClusterOn is newCluster with brokers in memory unless disk.
func newClusterOn(t *testing.T, place func(vhost, name string) string, disk bool) (*loopnet.Repl, []*Broker) {
	t.Helper()
	l := &loopnet.Repl{}
	net := loopnet.New(ErrLinkFull)
	t.Cleanup(net.Close)
	var bs []*Broker
	for _, name := range clusterNames {
		dir := ""
		if disk {
			dir = t.TempDir()
		}
		b, err := Open(Config{Node: name, DataDir: dir, PlaceQueue: place})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		b.SetReplicator(l.Join(b))
		b.SetNodes(func() []string { return clusterNames })
		net.Add(name, b)
		b.SetPeers(net.Peers(name))
		bs = append(bs, b)
	}
	return l, bs
}

func snap(t *testing.T, b *Broker) []byte {
	t.Helper()
	s, err := b.SnapshotDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func exportDefs(t *testing.T, b *Broker) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := b.ExportDefinitions(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sameEverywhere fails unless every broker has the same snapshot and the
// same exported definitions; it returns the snapshot.
func sameEverywhere(t *testing.T, bs []*Broker) []byte {
	t.Helper()
	s0, d0 := snap(t, bs[0]), exportDefs(t, bs[0])
	for i, b := range bs[1:] {
		if s := snap(t, b); !bytes.Equal(s, s0) {
			t.Fatalf("snapshot of %s differs from %s:\n%s\n%s", clusterNames[i+1], clusterNames[0], s, s0)
		}
		if d := exportDefs(t, b); !bytes.Equal(d, d0) {
			t.Fatalf("definitions of %s differ from %s:\n%s\n%s", clusterNames[i+1], clusterNames[0], d, d0)
		}
	}
	return s0
}

// TestClusterCommandsReplicate: issue 13, definitions through Raft: every
// kind of definition change made on any node appears identically on all.
func TestClusterCommandsReplicate(t *testing.T) {
	l, bs := newCluster(t, nil)
	a, b, c := bs[0], bs[1], bs[2]
	sameEverywhere(t, bs)

	if a.AddVHost("v1") == nil {
		t.Fatal("AddVHost returned nil")
	}
	if !b.SetVHostMeta("v1", VHostMeta{Description: "one", Tags: []string{"x"}}) {
		t.Fatal("SetVHostMeta")
	}
	must(t, c.PutUser("u1", "secret", []string{"management"}))
	must(t, a.SetPermissions("v1", "u1", Permission{Configure: "^u1\\.", Write: ".*", Read: ".*"}))
	must(t, b.SetTopicPermission("v1", "u1", TopicPermission{Exchange: "amq.topic", Write: "^a", Read: "^b"}))
	must(t, c.SetVHostLimit("v1", "max-queues", 100))
	must(t, a.SetUserLimit("u1", "max-connections", 5))
	must(t, b.SetParameter("v1", "test-component", "p1", map[string]any{"k": "v", "n": json.Number("3")}))
	must(t, c.VHost("v1").SetPolicy(Policy{Name: "pol", Pattern: "^q", ApplyTo: "queues", Priority: 1,
		Definition: map[string]any{"max-length": json.Number("10")}}))
	must(t, a.VHost("v1").SetOperatorPolicy(Policy{Name: "op", Pattern: ".*", ApplyTo: "queues",
		Definition: map[string]any{"message-ttl": json.Number("60000")}}))
	must(t, b.VHost("v1").DeclareExchange(ExchangeSpec{Name: "x1", Kind: KindTopic, Durable: true, Args: amqp.Table{"alternate-exchange": "ae"}}, false))
	must(t, b.VHost("v1").DeclareExchange(ExchangeSpec{Name: "x2", Kind: KindFanout, AutoDelete: true}, false))
	for i, s := range []QueueSpec{
		{Name: "q1", Durable: true, Args: amqp.Table{"x-max-length": int32(5), "x-message-ttl": int64(1000)}},
		{Name: "q2"},
		{Name: "q3", Exclusive: true, Owner: ConnIDBase("warren@c") + 1},
		{Name: NewQueueName(), ServerNamed: true, AutoDelete: true},
	} {
		q, _, _, err := bs[(i+2)%3].VHost("v1").DeclareQueue(s, false)
		must(t, err)
		if q.Name != s.Name {
			t.Fatalf("declared %q, got %q", s.Name, q.Name)
		}
	}
	must(t, a.VHost("v1").Bind("x1", "q1", false, "k.#", amqp.Table{"h": int8(1)}, 0))
	must(t, a.VHost("v1").Bind("x1", "x2", true, "k", nil, 0))
	must(t, b.VHost("v1").Bind("x2", "q2", false, "", nil, 0))
	must(t, c.VHost("v1").Bind("amq.direct", "q3", false, "r", nil, ConnIDBase("warren@c")+1))
	doc := `{"users":[{"name":"imp","password":"pw","tags":"administrator"}],
		"vhosts":[{"name":"v2"}],
		"permissions":[{"user":"imp","vhost":"v2","configure":".*","write":".*","read":".*"}],
		"exchanges":[{"name":"ix","vhost":"v2","type":"direct","durable":true,"auto_delete":false,"internal":false,"arguments":{}}],
		"queues":[{"name":"iq","vhost":"v2","durable":true,"auto_delete":false,"arguments":{"x-max-priority":5}}],
		"bindings":[{"source":"ix","vhost":"v2","destination":"iq","destination_type":"queue","routing_key":"k","arguments":{}}],
		"policies":[{"vhost":"v2","name":"ip","pattern":".*","apply-to":"queues","priority":0,"definition":{"max-length":7}}]}`
	must(t, b.ImportDefinitions(strings.NewReader(doc)))
	sameEverywhere(t, bs)
	for _, x := range bs {
		if _, ok := x.Authenticate("u1", "secret"); !ok {
			t.Fatalf("%s: u1 cannot authenticate", x.Node())
		}
		if _, ok := x.Authenticate("imp", "pw"); !ok {
			t.Fatalf("%s: imported user cannot authenticate", x.Node())
		}
		if q := x.VHost("v1").Queue("q1"); q == nil || q.Home != "warren@c" {
			t.Fatalf("%s: q1 = %+v, want home warren@c (declared there, client-local)", x.Node(), q)
		}
		if q := x.VHost("v2").Queue("iq"); q == nil || q.Home != "warren@b" {
			t.Fatalf("%s: imported iq = %+v, want home warren@b (imported there)", x.Node(), q)
		}
	}

	// And the deletions.
	must(t, c.VHost("v1").Unbind("x1", "q1", false, "k.#", amqp.Table{"h": int8(1)}, 0))
	must(t, a.VHost("v1").DeleteExchange("x1", false)) // x2 loses its only binding source? no: x2 is a destination
	if _, err := b.VHost("v1").DeleteQueue("q2", 0, false, false); err != nil {
		t.Fatal(err)
	}
	must(t, a.ClearPermissions("v1", "u1"))
	if !b.ClearTopicPermissions("v1", "u1", "") {
		t.Fatal("ClearTopicPermissions found nothing")
	}
	must(t, c.ClearVHostLimit("v1", "max-queues"))
	must(t, a.ClearUserLimit("u1", "max-connections"))
	must(t, b.DeleteParameter("v1", "test-component", "p1"))
	if !c.VHost("v1").DeletePolicy("pol") || !a.VHost("v1").DeleteOperatorPolicy("op") {
		t.Fatal("policy deletion found nothing")
	}
	if !b.DeleteUser("imp") {
		t.Fatal("DeleteUser found nothing")
	}
	if !c.DeleteVHost("v2") {
		t.Fatal("DeleteVHost found nothing")
	}
	if b.DeleteVHost("v2") || b.DeleteUser("imp") {
		t.Fatal("a second deletion reported something deleted")
	}
	s := sameEverywhere(t, bs)
	for _, gone := range []string{`"x1"`, `"q2"`, `"v2"`, `"imp"`, `"p1"`, `"pol"`} {
		if bytes.Contains(s, []byte(gone)) {
			t.Fatalf("%s still in the snapshot: %s", gone, s)
		}
	}
	if x := a.VHost("v1").Exchange("x2"); x != nil {
		t.Fatal("auto-delete exchange x2 survived the deletion of its last binding")
	}
	reapplyLastEntry(t, l.Log())
}

// reapplyLastEntry checks that every prefix of log, with its last entry
// applied twice (a crash before the applied index was recorded), gives
// the state of the prefix.
func reapplyLastEntry(t *testing.T, log [][]byte) {
	t.Helper()
	for n := 1; n <= len(log); n++ {
		b := New(Config{Node: "warren@x"})
		for i, cmd := range log[:n] {
			b.ApplyCommand(uint64(i+1), cmd)
		}
		once := snap(t, b)
		b.ApplyCommand(0, log[n-1]) // index 0: not skipped as applied
		if twice := snap(t, b); !bytes.Equal(once, twice) {
			t.Fatalf("entry %d applied twice: %s\nchanged\n%s\ninto\n%s", n, log[n-1], once, twice)
		}
	}
}

// TestClusterErrorsAsSingleNode: issue 13: a refused change answers on a
// cluster node exactly as on a single node, and nothing is applied.
func TestClusterErrorsAsSingleNode(t *testing.T) {
	l, bs := newCluster(t, nil)
	single := New(Config{})
	ownerA := ConnIDBase("warren@a") + 7
	for _, x := range []*Broker{single, bs[0]} {
		v := x.VHost("/")
		_, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Durable: true}, false)
		must(t, err)
		_, _, _, err = v.DeclareQueue(QueueSpec{Name: "ex", Exclusive: true, Owner: ownerA}, false)
		must(t, err)
	}
	before := sameEverywhere(t, bs)
	entries := len(l.Log())
	ownerB := ConnIDBase("warren@b") + 7
	cases := []struct {
		name string
		do   func(b *Broker) error
	}{
		{"406 inequivalent durable", func(b *Broker) error {
			_, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: "q"}, false)
			return err
		}},
		{"406 invalid argument", func(b *Broker) error {
			_, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: "bad", Args: amqp.Table{"x-max-length": "ten"}}, false)
			return err
		}},
		{"404 bind to a missing exchange", func(b *Broker) error {
			return b.VHost("/").Bind("nope", "q", false, "k", nil, 0)
		}},
		{"404 bind a missing queue", func(b *Broker) error {
			return b.VHost("/").Bind("amq.direct", "nope", false, "k", nil, 0)
		}},
		{"405 declare another connection's exclusive queue", func(b *Broker) error {
			_, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: "ex", Exclusive: true, Owner: ownerB}, false)
			return err
		}},
		{"405 bind another connection's exclusive queue", func(b *Broker) error {
			return b.VHost("/").Bind("amq.direct", "ex", false, "k", nil, ownerB)
		}},
		{"405 delete another connection's exclusive queue", func(b *Broker) error {
			_, err := b.VHost("/").DeleteQueue("ex", ownerB, false, false)
			return err
		}},
		{"403 reserved queue name", func(b *Broker) error {
			_, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: "amq.mine"}, false)
			return err
		}},
		{"403 reserved exchange name", func(b *Broker) error {
			return b.VHost("/").DeclareExchange(ExchangeSpec{Name: "amq.mine", Kind: KindDirect}, false)
		}},
		{"503 unknown exchange type", func(b *Broker) error {
			return b.VHost("/").DeclareExchange(ExchangeSpec{Name: "x", Kind: "nope"}, false)
		}},
		{"policy validation", func(b *Broker) error {
			return b.VHost("/").SetPolicy(Policy{Name: "p", Pattern: ".*", Definition: map[string]any{"max-length": "x"}})
		}},
	}
	for _, tc := range cases {
		want := tc.do(single)
		if want == nil {
			t.Fatalf("%s: no error on a single node", tc.name)
		}
		for _, x := range bs[1:] {
			got := tc.do(x)
			if got == nil || got.Error() != want.Error() {
				t.Fatalf("%s on %s: %v, single node: %v", tc.name, x.Node(), got, want)
			}
			var ga, wa *amqp.Error
			if errors.As(want, &wa) && (!errors.As(got, &ga) || *ga != *wa) {
				t.Fatalf("%s: %#v, single node %#v", tc.name, got, want)
			}
		}
	}
	if after := sameEverywhere(t, bs); !bytes.Equal(after, before) {
		t.Fatalf("a refused change was applied:\n%s\n%s", after, before)
	}
	t.Logf("%d refused commands went through the log, %d answered locally", len(l.Log())-entries, 2*len(cases)-(len(l.Log())-entries))
}

// TestClusterStorm: issue 13: a seeded storm of declares, deletes and
// binds from all three nodes at once ends with identical definitions.
func TestClusterStorm(t *testing.T) {
	_, bs := newClusterOn(t, nil, false) // in memory: thousands of fsyncs otherwise
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(seed + int64(i)))
			v := b.VHost("/")
			name := func(p string) string { return fmt.Sprintf("%s%d", p, r.Intn(6)) }
			for range 1000 {
				switch r.Intn(7) {
				case 0:
					v.DeclareQueue(QueueSpec{Name: name("q"), Durable: r.Intn(2) == 0, AutoDelete: r.Intn(4) == 0}, false)
				case 1:
					v.DeleteQueue(name("q"), 0, false, false)
				case 2:
					kinds := []string{KindDirect, KindTopic, KindFanout}
					v.DeclareExchange(ExchangeSpec{Name: name("x"), Kind: kinds[r.Intn(3)], Durable: r.Intn(2) == 0, AutoDelete: r.Intn(4) == 0}, false)
				case 3:
					v.DeleteExchange(name("x"), r.Intn(2) == 0)
				case 4:
					v.Bind(name("x"), name("q"), false, name("k"), nil, 0)
				case 5:
					v.Bind(name("x"), name("x"), true, name("k"), nil, 0)
				case 6:
					v.Unbind(name("x"), name("q"), false, name("k"), nil, 0)
				}
			}
		}()
	}
	wg.Wait()
	s := sameEverywhere(t, bs)
	if !bytes.Contains(s, []byte(`"q`)) {
		t.Logf("the storm left no queue: %s", s)
	}
}

// TestClusterSnapshotRestore: issue 13: a node catches up from a snapshot:
// restored into a fresh broker it gives the same state; restored into a
// broker with extra and differing entities it fixes them, and a queue that
// is identical keeps its messages.
func TestClusterSnapshotRestore(t *testing.T) {
	place := func(vhost, name string) string {
		if name == "keep" {
			return "warren@e"
		}
		return ""
	}
	_, bs := newCluster(t, place)
	a := bs[0]
	a.AddVHost("v1")
	must(t, a.PutUser("u", "pw", nil))
	must(t, a.SetPermissions("v1", "u", Permission{Configure: ".*"}))
	must(t, a.VHost("/").SetPolicy(Policy{Name: "p", Pattern: "^k", Definition: map[string]any{"max-length": json.Number("100")}}))
	v := a.VHost("/")
	must(t, v.DeclareExchange(ExchangeSpec{Name: "x", Kind: KindDirect, Durable: true}, false))
	for _, s := range []QueueSpec{{Name: "keep", Durable: true}, {Name: "diff", Durable: true}, {Name: "transient"}} {
		_, _, _, err := v.DeclareQueue(s, false)
		must(t, err)
	}
	must(t, v.Bind("x", "keep", false, "k", nil, 0))
	want := sameEverywhere(t, bs)

	fresh, err := Open(Config{Node: "warren@d", DataDir: t.TempDir()})
	must(t, err)
	defer fresh.Close()
	must(t, fresh.RestoreDefinitions(9, want))
	if got := snap(t, fresh); !bytes.Equal(got, want) {
		t.Fatalf("restored into a fresh broker:\n%s\nwant\n%s", got, want)
	}

	e, err := Open(Config{Node: "warren@e", DataDir: t.TempDir()})
	must(t, err)
	defer e.Close()
	e.AddVHost("extra")
	e.PutUser("u", "other", []string{"administrator"})
	ev := e.VHost("/")
	must(t, ev.SetPolicy(Policy{Name: "p", Pattern: "^k", Definition: map[string]any{"max-length": json.Number("5")}}))
	must(t, ev.DeclareExchange(ExchangeSpec{Name: "x", Kind: KindDirect, Durable: true}, false))
	must(t, ev.DeclareExchange(ExchangeSpec{Name: "extra-x", Kind: KindFanout}, false))
	_, _, _, err = ev.DeclareQueue(QueueSpec{Name: "keep", Durable: true, Home: "warren@e"}, false)
	must(t, err)
	_, _, _, err = ev.DeclareQueue(QueueSpec{Name: "diff", Durable: true, Args: amqp.Table{"x-max-length": int32(1)}, Home: "warren@a"}, false)
	must(t, err)
	_, _, _, err = ev.DeclareQueue(QueueSpec{Name: "extra-q"}, false)
	must(t, err)
	must(t, ev.Bind("x", "extra-q", false, "k", nil, 0))
	must(t, ev.Bind("extra-x", "keep", false, "", nil, 0))
	var r Router
	for i := range 3 {
		if _, err := ev.Publish(&r, "", &Message{RoutingKey: "keep", Body: []byte{byte(i)}, Props: amqp.Properties{DeliveryMode: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	keep := ev.Queue("keep")
	if bytes.Equal(snap(t, e), want) {
		t.Fatal("the test broker already has the snapshot's state")
	}
	must(t, e.RestoreDefinitions(10, want))
	if got := snap(t, e); !bytes.Equal(got, want) {
		t.Fatalf("restored over differing state:\n%s\nwant\n%s", got, want)
	}
	if ev.Queue("keep") != keep {
		t.Fatal("the identical queue was replaced")
	}
	if m, _ := keep.Counts(); m != 3 {
		t.Fatalf("the identical queue has %d messages after the restore, want 3", m)
	}
	if _, ok := e.Authenticate("u", "pw"); !ok {
		t.Fatal("the differing user was not restored")
	}
	// And the restored durable state is what a restart recovers.
	must(t, e.Close())
}

// TestClusterNoQuorum: issue 13: without a quorum a definition change
// fails with a 541 connection error that still is ErrNoQuorum, and
// nothing changes.
func TestClusterNoQuorum(t *testing.T) {
	l, bs := newCluster(t, nil)
	before := sameEverywhere(t, bs)
	l.SetFail(fmt.Errorf("%w: timed out after 5s", ErrNoQuorum))
	_, _, _, err := bs[1].VHost("/").DeclareQueue(QueueSpec{Name: "q", Durable: true}, false)
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("DeclareQueue: %v, want ErrNoQuorum", err)
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.InternalError || !ae.Hard {
		t.Fatalf("DeclareQueue: %#v, want a 541 connection error", err)
	}
	const text = "INTERNAL_ERROR - cluster has no quorum: declare of queue 'q' in vhost '/' not applied (timed out after 5s)"
	if ae.Text != text {
		t.Fatalf("text %q, want %q", ae.Text, text)
	}
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Reason != strings.TrimPrefix(text, "INTERNAL_ERROR - ") {
		t.Fatalf("QuorumError %+v", qe)
	}
	// An outcome the cluster could not confirm is not called "not applied".
	l.SetFail(fmt.Errorf("%w: timed out after 5s (%w)", ErrNoQuorum, ErrOutcomeUnknown))
	_, _, _, err = bs[1].VHost("/").DeclareQueue(QueueSpec{Name: "q", Durable: true}, false)
	if !errors.As(err, &ae) || !strings.HasPrefix(ae.Text, "INTERNAL_ERROR - cluster has no quorum: declare of queue 'q' in vhost '/' not confirmed (") {
		t.Fatalf("unknown outcome: %v", err)
	}
	// The group's own error wrapped by the Replicator: one "no quorum".
	l.SetFail(fmt.Errorf("%w: %w", ErrNoQuorum, errors.New("cluster has no quorum: no leader, proposal 7 was not applied")))
	_, err = bs[0].DeleteVHostE("/")
	if !errors.Is(err, ErrNoQuorum) || err.Error() != "INTERNAL_ERROR - cluster has no quorum: deletion of vhost '/' not applied (no leader, proposal 7 was not applied)" {
		t.Fatalf("DeleteVHostE: %v", err)
	}
	if err := bs[2].PutUser("x", "y", nil); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("PutUser: %v", err)
	}
	if after := sameEverywhere(t, bs); !bytes.Equal(after, before) {
		t.Fatal("a change was applied without a quorum")
	}
	// Reads and redeclares of what exists need no quorum.
	l.SetFail(nil)
	_, _, _, err = bs[1].VHost("/").DeclareQueue(QueueSpec{Name: "q", Durable: true}, false)
	must(t, err)
	l.SetFail(fmt.Errorf("%w: no leader", ErrNoQuorum))
	if _, _, _, err := bs[2].VHost("/").DeclareQueue(QueueSpec{Name: "q", Durable: true}, false); err != nil {
		t.Fatalf("an equivalent redeclare needed a quorum: %v", err)
	}
	if _, _, _, err := bs[2].VHost("/").DeclareQueue(QueueSpec{Name: "q"}, true); err != nil {
		t.Fatalf("a passive declare needed a quorum: %v", err)
	}
}

// TestClusterQueueHome: issue 13: queue homes: client-local by default and
// by x-queue-leader-locator, balanced by argument or policy (the node with
// the fewest queues, ties by name), exclusive queues on their owner's
// node, and Config.PlaceQueue overriding all.
func TestClusterQueueHome(t *testing.T) {
	_, bs := newCluster(t, nil)
	home := func(b *Broker, s QueueSpec) string {
		t.Helper()
		q, _, _, err := b.VHost("/").DeclareQueue(s, false)
		must(t, err)
		for _, x := range bs {
			if h := x.VHost("/").Queue(s.Name).Home; h != q.Home {
				t.Fatalf("%s: home of %s is %q on %s, %q on the declaring node", s.Name, x.Node(), h, x.Node(), q.Home)
			}
		}
		return q.Home
	}
	if h := home(bs[1], QueueSpec{Name: "plain"}); h != "warren@b" {
		t.Fatalf("default: %q", h)
	}
	if h := home(bs[2], QueueSpec{Name: "local", Args: amqp.Table{"x-queue-leader-locator": "client-local"}}); h != "warren@c" {
		t.Fatalf("client-local: %q", h)
	}
	// b and c have one queue each, a none.
	bal := amqp.Table{"x-queue-leader-locator": "balanced"}
	for i, want := range []string{"warren@a", "warren@a", "warren@b", "warren@c", "warren@a"} {
		if h := home(bs[2], QueueSpec{Name: fmt.Sprintf("bal%d", i), Args: bal}); h != want {
			t.Fatalf("balanced #%d: %q, want %q", i, h, want)
		}
	}
	must(t, bs[0].VHost("/").SetPolicy(Policy{Name: "loc", Pattern: "^pol", Definition: map[string]any{"queue-leader-locator": "balanced"}}))
	if h := home(bs[0], QueueSpec{Name: "pol1"}); h != "warren@b" { // a 3, b 2, c 2
		t.Fatalf("balanced by policy: %q", h)
	}
	if h := home(bs[0], QueueSpec{Name: "pol2", Exclusive: true, Owner: ConnIDBase("warren@a") + 1}); h != "warren@a" {
		t.Fatalf("exclusive: %q", h)
	}
	if _, _, _, err := bs[0].VHost("/").DeclareQueue(QueueSpec{Name: "badloc", Args: amqp.Table{"x-queue-leader-locator": "nearest"}}, false); err == nil {
		t.Fatal("an invalid locator was accepted")
	}

	_, placed := newCluster(t, func(vhost, name string) string { return "warren@c" })
	q, _, _, err := placed[0].VHost("/").DeclareQueue(QueueSpec{Name: "any", Args: amqp.Table{"x-queue-leader-locator": "client-local"}}, false)
	must(t, err)
	if q.Home != "warren@c" {
		t.Fatalf("PlaceQueue: %q", q.Home)
	}

	// A single node keeps no home.
	q, _, _, err = New(Config{}).VHost("/").DeclareQueue(QueueSpec{Name: "x", Args: bal}, false)
	must(t, err)
	if q.Home != "" {
		t.Fatalf("single node: home %q", q.Home)
	}
}

// TestClusterInternalDeletions: issue 13: the deletions a node decides by
// itself (exclusive queues of a closed connection, x-expires) are
// proposed by that node and applied everywhere; the exclusive queues of a
// node's connections go with the node (DropNodeExclusive).
func TestClusterInternalDeletions(t *testing.T) {
	_, bs := newCluster(t, nil)
	owner := ConnIDBase("warren@b") + 3
	_, _, _, err := bs[1].VHost("/").DeclareQueue(QueueSpec{Name: "ex", Exclusive: true, Owner: owner}, false)
	must(t, err)
	_, _, _, err = bs[2].VHost("/").DeclareQueue(QueueSpec{Name: "exp", Args: amqp.Table{"x-expires": int32(50)}}, false)
	must(t, err)
	_, _, _, err = bs[0].VHost("/").DeclareQueue(QueueSpec{Name: "ex-a", Exclusive: true, Owner: ConnIDBase("warren@a") + 3}, false)
	must(t, err)
	_, _, _, err = bs[0].VHost("/").DeclareQueue(QueueSpec{Name: "ex-c", Exclusive: true, Owner: ConnIDBase("warren@c") + 3}, false)
	must(t, err)
	bs[1].VHost("/").DeleteExclusive(owner)
	must(t, bs[2].DropNodeExclusive("warren@a")) // a restarted: its connections are gone
	for _, x := range bs {
		if x.VHost("/").Queue("ex-a") != nil || x.VHost("/").Queue("ex-c") == nil {
			t.Fatalf("%s: DropNodeExclusive(warren@a) deleted the wrong queues: %s", x.Node(), snap(t, x))
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		gone := 0
		for _, x := range bs {
			if x.VHost("/").Queue("ex") == nil && x.VHost("/").Queue("exp") == nil {
				gone++
			}
		}
		if gone == len(bs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exclusive or expired queue not deleted everywhere: %s", snap(t, bs[0]))
		}
		time.Sleep(5 * time.Millisecond)
	}
	sameEverywhere(t, bs)
}

// TestClusterRestartKeepsHome: issue 13: a restarted node recovers the
// applied state from its store: a durable queue's home, and in a cluster
// the transient and exclusive queues, exchanges and bindings too.
func TestClusterRestartKeepsHome(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(Config{Node: "warren@b", DataDir: dir})
	must(t, err)
	l := &loopnet.Repl{}
	b.SetReplicator(l.Join(b))
	v := b.VHost("/")
	_, _, _, err = v.DeclareQueue(QueueSpec{Name: "q", Durable: true, Home: "warren@a"}, false)
	must(t, err)
	// Transient and exclusive entities are replicated state in a cluster:
	// a restarted node has them too (the metadata group replays only the
	// entries after its applied index).
	_, _, _, err = v.DeclareQueue(QueueSpec{Name: "transient"}, false)
	must(t, err)
	_, _, _, err = v.DeclareQueue(QueueSpec{Name: "ex", Exclusive: true, Owner: ConnIDBase("warren@c") + 9}, false)
	must(t, err)
	must(t, v.DeclareExchange(ExchangeSpec{Name: "tx", Kind: KindFanout}, false))
	must(t, v.Bind("tx", "transient", false, "", nil, 0))
	must(t, v.Bind("amq.direct", "ex", false, "k", nil, ConnIDBase("warren@c")+9))
	must(t, v.Bind("tx", "amq.fanout", true, "", nil, 0))
	want := snap(t, b)
	must(t, b.Close())
	b, err = Open(Config{Node: "warren@b", DataDir: dir})
	must(t, err)
	defer b.Close()
	if q := b.VHost("/").Queue("q"); q == nil || q.Home != "warren@a" || q.disk != nil {
		t.Fatalf("after a restart: %+v (a remote queue has no local log)", q)
	}
	if got := snap(t, b); !bytes.Equal(got, want) {
		t.Fatalf("after a restart:\n%s\nwant\n%s", got, want)
	}
	// The applied index came back with the definitions: the entries up to
	// it are not applied again (the metadata group may replay its last
	// batch), a later one is.
	if got := b.AppliedIndex(); got != l.Index() {
		t.Fatalf("applied index %d after a restart, want %d", got, l.Index())
	}
	del, _ := json.Marshal(&command{Op: opQueueDelete, VHost: "/", Name: "transient"})
	must(t, b.ApplyCommand(l.Index(), del))
	if b.VHost("/").Queue("transient") == nil {
		t.Fatal("an entry at the applied index was applied again")
	}
	must(t, b.ApplyCommand(l.Index()+1, del))
	if b.VHost("/").Queue("transient") != nil {
		t.Fatal("the entry after the applied index was not applied")
	}
}

// TestClusterExpiryRetried: issue 13: an x-expires deletion that finds no
// quorum is retried once the queue expires again, and then applied on
// every node.
func TestClusterExpiryRetried(t *testing.T) {
	l, bs := newCluster(t, nil)
	_, _, _, err := bs[1].VHost("/").DeclareQueue(QueueSpec{Name: "exp", Args: amqp.Table{"x-expires": int32(30)}}, false)
	must(t, err)
	l.SetFail(fmt.Errorf("%w: no leader", ErrNoQuorum))
	deadline := time.Now().Add(5 * time.Second)
	for l.Failures() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the expiry was not proposed again after a failure")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, x := range bs {
		if x.VHost("/").Queue("exp") == nil {
			t.Fatalf("%s: deleted without a quorum", x.Node())
		}
	}
	l.SetFail(nil)
	for _, x := range bs {
		for x.VHost("/").Queue("exp") != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the expired queue was never deleted", x.Node())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sameEverywhere(t, bs)
}
