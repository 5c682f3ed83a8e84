package broker

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// memStore is an in-memory DefinitionStore that records every write.
type memStore struct {
	mu     sync.Mutex
	data   map[string]map[string][]byte
	writes []string
	fail   error
}

func newMemStore() *memStore { return &memStore{data: map[string]map[string][]byte{}} }

func (s *memStore) Put(kind, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	if s.data[kind] == nil {
		s.data[kind] = map[string][]byte{}
	}
	s.data[kind][key] = append([]byte(nil), value...)
	s.writes = append(s.writes, "put "+kind+" "+strings.ReplaceAll(key, "\x00", "/"))
	return nil
}

func (s *memStore) Delete(kind, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	delete(s.data[kind], key)
	s.writes = append(s.writes, "del "+kind+" "+strings.ReplaceAll(key, "\x00", "/"))
	return nil
}

func (s *memStore) ForEach(kind string, fn func(key, value []byte) error) error {
	s.mu.Lock()
	keys := make([]string, 0, len(s.data[kind]))
	for k := range s.data[kind] {
		keys = append(keys, k)
	}
	vals := s.data[kind]
	s.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn([]byte(k), vals[k]); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) keys(kind string) []string {
	var out []string
	_ = s.ForEach(kind, func(k, _ []byte) error {
		out = append(out, strings.ReplaceAll(string(k), "\x00", "/"))
		return nil
	})
	return out
}

func (s *memStore) nwrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

func bootT(t *testing.T, s *memStore) *Broker {
	t.Helper()
	b := New(Config{Store: s})
	if err := b.Recover(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPersistFirstBootOnly(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	if !b.FirstBoot() || b.User("guest") == nil || b.VHost("/") == nil {
		t.Fatal("first boot: no defaults")
	}
	b.DeleteUser("guest")
	b.PutUser("admin", "pw", []string{"administrator"})
	b2 := bootT(t, s)
	if b2.FirstBoot() {
		t.Error("second boot reported as first")
	}
	if b2.User("guest") != nil {
		t.Error("deleted guest came back")
	}
	if _, ok := b2.Authenticate("admin", "pw"); !ok {
		t.Error("stored user cannot log in")
	}
	if b2.VHost("/") == nil {
		t.Error("vhost / lost")
	}
}

func TestPersistRoundTrip(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	b.AddVHost("v2")
	b.PutUser("bob", "secret", []string{"monitoring"})
	if err := b.SetPermissions("v2", "bob", Permission{Configure: "^c", Write: "^w", Read: "^r"}); err != nil {
		t.Fatal(err)
	}
	v := b.VHost("v2")
	if err := v.SetPolicy(Policy{Name: "ml", Pattern: "^pq$", ApplyTo: "queues", Priority: 3, Definition: map[string]any{"max-length": 5}}); err != nil {
		t.Fatal(err)
	}
	if err := v.SetOperatorPolicy(Policy{Name: "op", Pattern: ".*", Definition: map[string]any{"max-length": 100}}); err != nil {
		t.Fatal(err)
	}
	args := amqp.Table{"x-max-length": int32(7), "x-message-ttl": int64(60000), "x-dead-letter-exchange": "dlx"}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.DeclareExchange(ExchangeSpec{Name: "dx", Kind: KindTopic, Durable: true, Args: amqp.Table{"alternate-exchange": "ae"}}, false))
	must(v.DeclareExchange(ExchangeSpec{Name: "tx", Kind: KindFanout}, false))
	must(v.DeclareExchange(ExchangeSpec{Name: "dx2", Kind: KindDirect, Durable: true}, false))
	for _, q := range []QueueSpec{
		{Name: "dq", Durable: true, Args: args},
		{Name: "pq", Durable: true},
		{Name: "adq", Durable: true, AutoDelete: true},
		{Name: "tq"},
		{Name: "xq", Durable: true, Exclusive: true, Owner: 1},
		{Name: "amq.gen-abc", Durable: true, ServerNamed: true},
	} {
		_, _, _, err := v.DeclareQueue(q, false)
		must(err)
	}
	must(v.Bind("dx", "dq", false, "a.#", nil, 0))
	must(v.Bind("dx", "dq", false, "b.*", amqp.Table{"k": int16(1)}, 0))
	must(v.Bind("dx", "dx2", true, "c", nil, 0))
	must(v.Bind("amq.direct", "dq", false, "d", nil, 0))
	must(v.Bind("dx", "tq", false, "t", nil, 0)) // transient destination
	must(v.Bind("tx", "dq", false, "t", nil, 0)) // transient source
	must(v.Bind("dx", "xq", false, "x", nil, 1)) // exclusive destination
	must(v.Bind("dx2", "pq", false, "gone", nil, 0))
	must(v.Unbind("dx2", "pq", false, "gone", nil, 0))

	if got := s.keys(DefKindQueues); strings.Join(got, ",") != "v2/adq,v2/amq.gen-abc,v2/dq,v2/pq" {
		t.Errorf("queue records %v", got)
	}
	if got := s.keys(DefKindExchanges); strings.Join(got, ",") != "v2/dx,v2/dx2" {
		t.Errorf("exchange records %v", got)
	}
	if got := len(s.keys(DefKindBindings)); got != 4 {
		t.Errorf("%d binding records, want 4: %v", got, s.keys(DefKindBindings))
	}

	n := s.nwrites()
	b2 := bootT(t, s)
	if s.nwrites() != n {
		t.Errorf("recovery wrote: %v", s.writes[n:])
	}
	v2 := b2.VHost("v2")
	if v2 == nil {
		t.Fatal("vhost v2 lost")
	}
	if p, ok := b2.Permissions("v2", "bob"); !ok || p.Write != "^w" {
		t.Errorf("permissions %v %v", p, ok)
	}
	if _, ok := b2.Authenticate("bob", "secret"); !ok || !b2.User("bob").HasTag("monitoring") {
		t.Error("bob lost")
	}
	if v2.Queue("tq") != nil || v2.Queue("xq") != nil || v2.Exchange("tx") != nil {
		t.Error("transient or exclusive entities survived")
	}
	q := v2.Queue("dq")
	if q == nil || v2.Queue("adq") == nil || !v2.Queue("adq").AutoDelete || v2.Queue("amq.gen-abc") == nil {
		t.Fatal("durable queues lost")
	}
	if _, ok := q.Args["x-max-length"].(int32); !ok {
		t.Errorf("x-max-length is %T, want int32", q.Args["x-max-length"])
	}
	if _, ok := q.Args["x-message-ttl"].(int64); !ok {
		t.Errorf("x-message-ttl is %T, want int64", q.Args["x-message-ttl"])
	}
	if _, _, _, err := v2.DeclareQueue(QueueSpec{Name: "dq", Durable: true, Args: args}, false); err != nil {
		t.Errorf("redeclare with the same args: %v", err)
	}
	if x := v2.Exchange("dx"); x == nil || x.Kind != KindTopic || x.alternate() != "ae" {
		t.Errorf("exchange dx %+v", x)
	}
	if p, _ := v2.QueuePolicy(v2.Queue("pq")); p != "ml" {
		t.Errorf("policy on pq: %q", p)
	}
	if len(v2.OperatorPolicies()) != 1 {
		t.Error("operator policy lost")
	}
	var got []string
	for _, bi := range v2.Bindings() {
		if bi.Source != "" {
			got = append(got, bi.Source+">"+bi.Destination+":"+bi.RoutingKey)
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "amq.direct>dq:d dx>dq:a.# dx>dq:b.* dx>dx2:c" {
		t.Errorf("bindings after recovery: %v", got)
	}
}

func TestPersistDeletes(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	v := b.AddVHost("v")
	b.PutUser("u", "p", nil)
	b.SetPermissions("v", "u", Permission{Read: ".*"})
	b.SetPermissions("/", "u", Permission{Read: ".*"})
	v.DeclareExchange(ExchangeSpec{Name: "x", Kind: KindDirect, Durable: true}, false)
	v.DeclareExchange(ExchangeSpec{Name: "ax", Kind: KindDirect, Durable: true, AutoDelete: true}, false)
	v.DeclareQueue(QueueSpec{Name: "q", Durable: true}, false)
	v.DeclareQueue(QueueSpec{Name: "q2", Durable: true}, false)
	v.Bind("x", "q", false, "k", nil, 0)
	v.Bind("ax", "q2", false, "k", nil, 0)
	v.SetPolicy(Policy{Name: "p", Pattern: ".", Definition: map[string]any{"max-length": 1}})

	// A deleted queue takes its bindings, and the auto-delete exchange
	// that lost its last binding, with it.
	if _, err := v.DeleteQueue("q2", 0, false, false); err != nil {
		t.Fatal(err)
	}
	if got := s.keys(DefKindExchanges); strings.Join(got, ",") != "v/x" {
		t.Errorf("exchanges after deleting q2: %v", got)
	}
	// A deleted exchange takes its bindings.
	v.DeleteExchange("x", false)
	if got := s.keys(DefKindBindings); len(got) != 0 {
		t.Errorf("bindings after deleting x: %v", got)
	}
	// A deleted user takes its permissions.
	b.DeleteUser("u")
	if got := s.keys(DefKindPermissions); strings.Join(got, ",") != "//guest" {
		t.Errorf("permissions after deleting u: %v", got)
	}
	v.DeletePolicy("p")
	if got := s.keys(DefKindPolicies); len(got) != 0 {
		t.Errorf("policies: %v", got)
	}
	// A deleted vhost takes everything under it.
	v.DeclareQueue(QueueSpec{Name: "q3", Durable: true}, false)
	v.SetOperatorPolicy(Policy{Name: "op", Pattern: ".", Definition: map[string]any{"max-length": 1}})
	b.PutUser("w", "p", nil)
	b.SetPermissions("v", "w", Permission{Read: ".*"})
	b.DeleteVHost("v")
	for _, k := range append([]string{DefKindVHosts}, vhostScopedKinds...) {
		for _, key := range s.keys(k) {
			if strings.HasPrefix(key, "v/") || key == "v" {
				t.Errorf("%s record %s survived its vhost", k, key)
			}
		}
	}
	b2 := bootT(t, s)
	if b2.VHost("v") != nil || b2.User("u") != nil || b2.User("w") == nil {
		t.Error("state after recovery")
	}
}

func TestPersistFailureIsReturned(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	s.fail = errors.New("disk on fire")
	_, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: "q", Durable: true}, false)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.InternalError || !strings.Contains(ae.Text, "disk on fire") {
		t.Fatalf("declare with a failing store: %v", err)
	}
	// Transient entities never touch the store.
	if _, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: "t"}, false); err != nil {
		t.Fatal(err)
	}
}

// Concurrent declares and deletes of the same queue leave the store in
// the state of memory: records are written in the order of the changes.
func TestPersistOrderUnderRace(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	v := b.VHost("/")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if (w+i)%2 == 0 {
					v.DeclareQueue(QueueSpec{Name: "race", Durable: true}, false)
				} else {
					v.DeleteQueue("race", 0, false, false)
				}
			}
		}()
	}
	wg.Wait()
	inMem := v.Queue("race") != nil
	inStore := len(s.keys(DefKindQueues)) == 1
	if inMem != inStore {
		t.Fatalf("queue in memory %v, in store %v", inMem, inStore)
	}
}

// A crash between a deletion's writes (each record is its own store
// transaction) can leave binding records whose source or destination
// record is gone. Recovery removes them, so that they do not come back
// once an object of that name is declared again (found by the session
// fuzzer, issue 11: amq.topic -> X listed again after X was deleted,
// re-declared and the broker restarted). Bindings to an object whose
// record exists are kept.
func TestRecoverDropsOrphanBindings(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	v := b.VHost("/")
	for _, x := range []string{"x", "kept"} {
		if err := v.DeclareExchange(ExchangeSpec{Name: x, Kind: KindDirect, Durable: true}, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Durable: true}, false); err != nil {
		t.Fatal(err)
	}
	for _, bind := range []struct {
		src, dst   string
		toExchange bool
	}{{"amq.topic", "x", true}, {"x", "q", false}, {"amq.topic", "kept", true}} {
		if err := v.Bind(bind.src, bind.dst, bind.toExchange, "k", nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	// What a crash after the first write of exchange.delete x leaves.
	if err := s.Delete(DefKindExchanges, scopedKey("/", "x")); err != nil {
		t.Fatal(err)
	}
	b2 := bootT(t, s)
	if got := s.keys(DefKindBindings); len(got) != 1 {
		t.Fatalf("binding records after recovery: %q, want only amq.topic -> kept", got)
	}
	if err := b2.VHost("/").DeclareExchange(ExchangeSpec{Name: "x", Kind: KindDirect, Durable: true}, false); err != nil {
		t.Fatal(err)
	}
	b3 := bootT(t, s)
	for _, bi := range b3.VHost("/").Bindings() {
		if bi.Source == "x" || bi.Destination == "x" {
			t.Errorf("binding %s -> %s came back after x was re-declared and the broker restarted", bi.Source, bi.Destination)
		}
	}
}
