package integration

// Replicated streams (issue 25): a stream declared in a cluster lives on
// every node (x-initial-cluster-size's default), kept in step by its Raft
// group whose log is the stream's segments.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	samqp "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/warrenmq/warren/streamraft"
	"github.com/warrenmq/warren/warrentest"
)

// declareClusterStream declares stream name on node nd, waiting until the
// nodes have told each other that they replicate streams.
func declareClusterStream(t *testing.T, nd *warrentest.Node, name string, args amqp.Table) {
	t.Helper()
	var err error
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var conn *amqp.Connection
		conn, err = amqp.Dial(nd.URL())
		if err != nil {
			continue
		}
		ch, _ := conn.Channel()
		_, err = ch.QueueDeclare(name, true, false, false, false, args)
		conn.Close()
		if err == nil {
			return
		}
	}
	t.Fatalf("declaring stream %s: %v", name, err)
}

// streamLeaderIndex is the index of the node that leads stream name as
// node 0.. know it (-1 none).
func streamLeaderIndex(c *warrentest.Cluster, name string) int {
	for _, nd := range c.Nodes() {
		b := nd.Broker()
		if b == nil {
			continue
		}
		q := b.VHost("/").Queue(name)
		if q == nil {
			continue
		}
		l, _ := q.StreamMembers()
		for i, o := range c.Nodes() {
			if o.Name() == l && o.Running() {
				return i
			}
		}
	}
	return -1
}

// publishStreamConfirmed publishes bodies on url's node with confirms and
// fails unless every one is acked.
func publishStreamConfirmed(t *testing.T, url, queue string, bodies []string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var dcs []*amqp.DeferredConfirmation
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp.Publishing{Body: []byte(b), DeliveryMode: 2})
		if err != nil {
			t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		if err != nil || !ok {
			t.Fatalf("publish %d (%s) not confirmed: ok=%v err=%v", i, bodies[i], ok, err)
		}
	}
}

// consumeStream reads n messages of queue from first on url's node and
// returns their bodies and offsets.
func consumeStream(t *testing.T, url, queue string, n int) ([]string, []int64) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	ch.Qos(100, 0, false)
	ds, err := ch.Consume(queue, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	var offs []int64
	timeout := time.After(30 * time.Second)
	for len(bodies) < n {
		select {
		case d := <-ds:
			bodies = append(bodies, string(d.Body))
			offs = append(offs, d.Headers["x-stream-offset"].(int64))
			d.Ack(false)
		case <-timeout:
			t.Fatalf("read %d of %d messages", len(bodies), n)
		}
	}
	return bodies, offs
}

func bodiesRange(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// streamFiles reads a node's segment and index files of stream name.
func streamFiles(t *testing.T, nd *warrentest.Node, name string) map[string][]byte {
	t.Helper()
	files, err := streamFilesIn(nd.DataDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// streamFilesIn reads the segment and index files of stream name (in
// vhost /) under a node's data directory.
func streamFilesIn(dataDir, name string) (map[string][]byte, error) {
	dir := filepath.Join(dataDir, "streams", "%2F", name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".segment") || strings.HasSuffix(e.Name(), ".index") {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			out[e.Name()] = b
		}
	}
	return out, nil
}

// replicasAgree waits until every running node holds the same stream
// files, byte for byte.
func replicasAgree(t *testing.T, c *warrentest.Cluster, name string) {
	t.Helper()
	var why string
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		why = ""
		ref := streamFiles(t, c.Node(0), name)
		for _, nd := range c.Nodes()[1:] {
			got := streamFiles(t, nd, name)
			if len(got) != len(ref) {
				why = fmt.Sprintf("%s has %d files, %s %d", nd.Name(), len(got), c.Node(0).Name(), len(ref))
				break
			}
			for f, b := range ref {
				if !bytes.Equal(got[f], b) {
					why = fmt.Sprintf("%s differs on %s (%d against %d bytes)", f, nd.Name(), len(got[f]), len(b))
					break
				}
			}
		}
		if why == "" {
			return
		}
	}
	t.Fatalf("the replicas do not agree: %s", why)
}

// TestStreamReplicatedAMQP: a stream in a 3-node cluster over AMQP 0-9-1:
// publishes on any node (the others forward to the leader) are confirmed
// once a majority has them, consumers on any node read them all, a
// crashed leader loses nothing confirmed, and afterwards the replicas
// hold the same bytes.
func TestStreamReplicatedAMQP(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	name := "rs-amqp"
	declareClusterStream(t, c.Node(0), name, amqp.Table{"x-queue-type": "stream", "x-stream-max-segment-size-bytes": int64(20000)})
	for i := range 3 {
		for end := time.Now().Add(5 * time.Second); c.Node(i).Broker().VHost("/").Queue(name) == nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("node %d has no stream", i)
			}
		}
	}
	for _, nd := range c.Nodes() {
		publishStreamConfirmed(t, nd.URL(), name, bodiesRange(nd.Name(), 0, 100))
	}
	for _, nd := range c.Nodes() {
		bodies, offs := consumeStream(t, nd.URL(), name, 300)
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Fatalf("%s: offsets go back: %v", nd.Name(), offs[i-1:i+1])
			}
		}
		for i, b := range bodies {
			want := bodiesRange(c.Node(i/100).Name(), i%100, i%100+1)[0]
			if b != want {
				t.Fatalf("%s: message %d is %s, want %s (offsets %v)", nd.Name(), i, b, want, offs[:min(len(offs), 50)])
			}
		}
	}
	l := streamLeaderIndex(c, name)
	if l < 0 {
		t.Fatal("no stream leader")
	}
	c.Node(l).Crash()
	other := (l + 1) % 3
	publishStreamConfirmed(t, c.Node(other).URL(), name, bodiesRange("after", 0, 100))
	third := (l + 2) % 3
	bodies, _ := consumeStream(t, c.Node(third).URL(), name, 400)
	if bodies[399] != "after-99" {
		t.Fatalf("last message read on %s after the crash: %s", c.Node(third).Name(), bodies[399])
	}
	c.Node(l).Start()
	bodies, _ = consumeStream(t, c.Node(l).URL(), name, 400)
	if bodies[300] != "after-0" || bodies[399] != "after-99" {
		t.Fatalf("the restarted node reads %s ... %s", bodies[300], bodies[399])
	}
	replicasAgree(t, c, name)
}

// TestStreamReplicatedProtocol: RabbitMQ's Go stream client against a
// 3-node cluster: Metadata names the leader and the replicas with each
// node's endpoint, the client publishes to the leader and consumes from a
// replica, deduplication holds across nodes.
func TestStreamReplicatedProtocol(t *testing.T) {
	c := warrentest.StartCluster(t, 3, warrentest.WithStreams())
	name := "rs-proto"
	declareClusterStream(t, c.Node(1), name, amqp.Table{"x-queue-type": "stream"})
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().
		SetUri("rabbitmq-stream://guest:guest@" + c.Node(0).StreamAddr() + "/%2f"))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	var meta *stream.StreamMetadata
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		m, err := env.StreamMetaData(name)
		if err == nil && m.Leader != nil && len(m.Replicas) == 2 {
			meta = m
			break
		}
	}
	if meta == nil {
		t.Fatal("no metadata with a leader and two replicas")
	}
	eps := map[string]bool{}
	for _, nd := range c.Nodes() {
		eps[nd.StreamAddr()] = true
	}
	for _, b := range append([]*stream.Broker{meta.Leader}, meta.Replicas...) {
		if !eps[b.Host+":"+b.Port] {
			t.Fatalf("metadata names %s:%s, not a node's stream endpoint (%v)", b.Host, b.Port, eps)
		}
	}
	p, err := env.NewProducer(name, stream.NewProducerOptions().SetProducerName("dedup"))
	if err != nil {
		t.Fatal(err)
	}
	confirms := p.NotifyPublishConfirmation()
	for i := range 200 {
		m := samqp.NewMessage([]byte(fmt.Sprintf("m%d", i)))
		m.SetPublishingId(int64(i))
		if err := p.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for timeout := time.After(20 * time.Second); got < 200; {
		select {
		case cs := <-confirms:
			for _, c := range cs {
				if !c.IsConfirmed() {
					t.Fatalf("publish %d not confirmed", c.GetPublishingId())
				}
				got++
			}
		case <-timeout:
			t.Fatalf("%d of 200 confirmed", got)
		}
	}
	p.Close()
	// the same publisher again: its ids are known on every node
	seq, err := env.QuerySequence("dedup", name)
	if err != nil || seq != 199 {
		t.Fatalf("publisher sequence %d, %v", seq, err)
	}
	var mu sync.Mutex
	var seen []string
	cons, err := env.NewConsumer(name, func(_ stream.ConsumerContext, m *samqp.Message) {
		mu.Lock()
		seen = append(seen, string(m.GetData()))
		mu.Unlock()
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("consumed %d of 200", n)
		}
	}
	// The stream protocol's lists are the cluster's: every node lists
	// the one consumer, whichever node it reads from.
	for _, nd := range c.Nodes() {
		var cs []map[string]any
		if err := getJSONAuth(nd.MgmtURL()+"/api/stream/consumers", &cs); err != nil || len(cs) != 1 {
			t.Fatalf("%s lists stream consumers %v (%v)", nd.Name(), cs, err)
		}
		var conns []map[string]any
		if err := getJSONAuth(nd.MgmtURL()+"/api/stream/connections/%2F", &conns); err != nil || len(conns) == 0 {
			t.Fatalf("%s lists stream connections %v (%v)", nd.Name(), conns, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range seen[:200] {
		if s != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d is %s", i, s)
		}
	}
	replicasAgree(t, c, name)
}

// TestStreamReplicatedDeleteRedeclare: a replicated stream deleted while
// it has messages and consumers, then declared again under its name,
// starts empty on every node (a new group, no old log).
func TestStreamReplicatedDeleteRedeclare(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	name := "rs-redeclare"
	declareClusterStream(t, c.Node(0), name, amqp.Table{"x-queue-type": "stream"})
	publishStreamConfirmed(t, c.Node(1).URL(), name, bodiesRange("old", 0, 50))
	consumeStream(t, c.Node(2).URL(), name, 50)
	conn, err := amqp.Dial(c.Node(2).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	ch.Qos(10, 0, false)
	ds, err := ch.Consume(name, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	<-ds
	admin, err := amqp.Dial(c.Node(0).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ach, _ := admin.Channel()
	if _, err := ach.QueueDelete(name, false, false, false); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		for end := time.Now().Add(5 * time.Second); c.Node(i).Broker().VHost("/").Queue(name) != nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("node %d still has the stream", i)
			}
		}
	}
	declareClusterStream(t, c.Node(1), name, amqp.Table{"x-queue-type": "stream"})
	publishStreamConfirmed(t, c.Node(0).URL(), name, bodiesRange("new", 0, 5))
	for _, nd := range c.Nodes() {
		bodies, offs := consumeStream(t, nd.URL(), name, 5)
		if bodies[0] != "new-0" || bodies[4] != "new-4" {
			t.Fatalf("%s reads %v after the redeclare", nd.Name(), bodies)
		}
		if offs[4] > 20 {
			t.Fatalf("%s: offsets %v: the old log is still there", nd.Name(), offs)
		}
	}
	replicasAgree(t, c, name)
}

// TestStreamQuiescedFailover: an idle replicated stream's group quiesces
// (no heartbeats, no election clock: streamraft/quiesce.go), and the loss
// of its leader's node still elects another, from the cluster's links:
// a publish through a surviving node is confirmed, the consumers on both
// read everything, and once idle again the group quiesces again.
func TestStreamQuiescedFailover(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	name := "rs-quiet"
	declareClusterStream(t, c.Node(0), name, amqp.Table{"x-queue-type": "stream"})
	publishStreamConfirmed(t, c.Node(0).URL(), name, bodiesRange("before", 0, 10))
	quiesced := func(nodes ...int) {
		t.Helper()
		var sts []string
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			all := true
			sts = sts[:0]
			for _, i := range nodes {
				q := c.Node(i).Broker().VHost("/").Queue(name)
				var st streamraft.Status
				ok := q != nil
				if ok {
					st, ok = q.StreamRaftStatus()
				}
				all = all && ok && st.Quiesced
				sts = append(sts, fmt.Sprintf("%s: %+v", c.Node(i).Name(), st))
			}
			if all {
				return
			}
		}
		t.Fatalf("the stream's group did not quiesce: %v", sts)
	}
	quiesced(0, 1, 2)
	l := streamLeaderIndex(c, name)
	if l < 0 {
		t.Fatal("no stream leader")
	}
	c.Node(l).Crash()
	a, b := (l+1)%3, (l+2)%3
	publishStreamConfirmed(t, c.Node(a).URL(), name, bodiesRange("after", 0, 10))
	for _, i := range []int{a, b} {
		bodies, _ := consumeStream(t, c.Node(i).URL(), name, 20)
		if bodies[0] != "before-0" || bodies[19] != "after-9" {
			t.Fatalf("%s reads %v", c.Node(i).Name(), bodies)
		}
	}
	quiesced(a, b)
}

// TestStreamQueriesAskTheLeader: QueryPublisherSequence and QueryOffset
// answer what the leader knows on every node, as RabbitMQ's
// rabbit_stream_reader asks the leader's writer for both: on a node that
// holds no replica of the stream (x-initial-cluster-size 2 of 3) they
// give the publisher's last id and the offset a consumer stored on
// another node.
func TestStreamQueriesAskTheLeader(t *testing.T) {
	c := warrentest.StartCluster(t, 3, warrentest.WithStreams())
	name := "rs-query"
	declareClusterStream(t, c.Node(0), name, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": int64(2)})
	outside := -1
	for end := time.Now().Add(10 * time.Second); outside < 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for i, nd := range c.Nodes() {
			if q := nd.Broker().VHost("/").Queue(name); q != nil {
				if ms, ok := q.StreamReplicas(); ok && len(ms) == 2 && !slices.Contains(ms, nd.Name()) {
					outside = i
				}
			}
		}
	}
	if outside < 0 {
		t.Fatal("no node outside the stream's two members")
	}
	member := (outside + 1) % 3
	envAt := func(i int) *stream.Environment {
		env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().
			SetUri("rabbitmq-stream://guest:guest@" + c.Node(i).StreamAddr() + "/%2f"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { env.Close() })
		return env
	}
	in := envAt(member)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if m, err := in.StreamMetaData(name); err == nil && m.Leader != nil && len(m.Replicas) == 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no metadata with a leader and a replica")
		}
	}
	p, err := in.NewProducer(name, stream.NewProducerOptions().SetProducerName("q-pub"))
	if err != nil {
		t.Fatal(err)
	}
	confirms := p.NotifyPublishConfirmation()
	for i := range 20 {
		m := samqp.NewMessage([]byte(fmt.Sprintf("m%d", i)))
		m.SetPublishingId(int64(100 + i))
		if err := p.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for got, timeout := 0, time.After(20*time.Second); got < 20; {
		select {
		case cs := <-confirms:
			got += len(cs)
		case <-timeout:
			t.Fatalf("%d of 20 confirmed", got)
		}
	}
	p.Close()
	cons, err := in.NewConsumer(name, func(stream.ConsumerContext, *samqp.Message) {},
		stream.NewConsumerOptions().SetConsumerName("q-cons").SetManualCommit().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.StoreCustomOffset(7); err != nil {
		t.Fatal(err)
	}
	out := envAt(outside)
	if seq, err := out.QuerySequence("q-pub", name); err != nil || seq != 119 {
		t.Fatalf("publisher sequence on %s (no replica): %d, %v; want 119", c.Node(outside).Name(), seq, err)
	}
	var off int64
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if off, err = out.QueryOffset("q-cons", name); err == nil && off == 7 {
			break
		}
	}
	if off != 7 {
		t.Fatalf("stored offset on %s (no replica): %d, %v; want 7", c.Node(outside).Name(), off, err)
	}
	cons.Close()
}
