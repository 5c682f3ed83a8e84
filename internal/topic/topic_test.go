package topic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// refTopicMatch is the reference matcher: a direct recursive reading of the
// topic semantics over split words.
func refTopicMatch(pattern, key []string) bool {
	if len(pattern) == 0 {
		return len(key) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(key); i++ {
			if refTopicMatch(pattern[1:], key[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(key) > 0 && refTopicMatch(pattern[1:], key[1:])
	}
	return len(key) > 0 && key[0] == pattern[0] && refTopicMatch(pattern[1:], key[1:])
}

func refTopic(pattern, key string) bool {
	return refTopicMatch(Split(pattern), Split(key))
}

// trieMatches binds pattern alone and reports whether key matches it.
func trieMatches(pattern, key string) bool {
	t := New[int]()
	t.Add(pattern, 1)
	found := false
	t.Match(key, func(int) { found = true })
	return found
}

// matchSet returns the deduplicated, sorted values matching key.
func matchSet[T interface {
	comparable
	~int | ~string
}](t *Trie[T], key string) []T {
	seen := map[T]bool{}
	var out []T
	t.Match(key, func(v T) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	})
	slices.Sort(out)
	return out
}

// Each case was checked against RabbitMQ 3.10.8 (127.0.0.1:5672) by binding
// a queue to a fresh topic exchange with the binding key, publishing with the
// routing key under publisher confirms, and calling basic.get. A probe of
// 532 edge pairs and 1,500 random pairs over the words {a, b, "", *, #}
// agreed with refTopicMatch on every pair.
var topicCases = []struct {
	pattern, key string
	want         bool
}{
	// The empty key has zero words.
	{"", "", true},
	{"", ".", false},
	{"", "a", false},
	{"#", "", true},
	{"*", "", false},
	{"#.#", "", true},
	{"#.#.#", "", true},
	{"*.#", "", false},
	{"#.*", "", false},
	{"#.*.#", "", false},
	{".#", "", false},
	{"#.", "", false},
	{".", "", false},
	// Empty words are words.
	{".", ".", true},
	{".", "..", false},
	{"*", ".", false},
	{"*.*", ".", true},
	{"*.", ".", true},
	{"*.", "a.", true},
	{"*.", "a", false},
	{"#.*.#", ".", true},
	{"#.*.#", "a", true},
	{".#", ".", true},
	{".#", "..", true},
	{".#", ".a", true},
	{".#", "a", false},
	{".#", "a.", false},
	{"#.", ".", true},
	{"#.", "..", true},
	{"#.", "a.", true},
	{"#.", "a", false},
	{"#.", ".a", false},
	{"a.", "a.", true},
	{"a.", "a", false},
	{"a.", "a.b", false},
	{".a", ".a", true},
	{".a", "a", false},
	{"a..b", "a..b", true},
	{"a..b", "a.b", false},
	{"a..b", "a.x.b", false},
	{"a.*.b", "a..b", true},
	{"a.#.b", "a.b", true},
	{"a.#.b", "a..b", true},
	{"a.#.#.b", "a.b", true},
	{"a.#.#.b", "a..b", true},
	{"a.#.#.b", "a.x.y.b", true},
	{"a.#.#.b", "a.b.c", false},
	// '*' and '#' in routing keys are ordinary words.
	{"*", "*", true},
	{"*", "#", true},
	{"#", "#", true},
	{"#", "*", true},
	{"a.*", "a.#", true},
	{"a", "*", false},
	{"*", "a..b", false},
	{"*", "a.b", false},
	// Ordinary cases.
	{"#", "a", true},
	{"#", "a.b.c.d", true},
	{"#", "..", true},
	{"*", "a", true},
	{"*", "b", true},
	{"*.*", "a.b", true},
	{"*.*", "a", false},
	{"*.*", "a.b.c", false},
	{"a.*", "a.b", true},
	{"a.*", "a", false},
	{"*.a", "x.a", true},
	{"#.a", "x.a", true},
	{"#.a", "a", true},
	{"#.a", "a.a", true},
	{"#.a", "a.b", false},
	{"a.#", "a", true},
	{"a.#", "a.b.c", true},
	{"a.#", "b.a", false},
	{"#.#", "a.b", true},
	{"#.b.#", "x.b.y", true},
	{"#.b.#", "b", true},
	{"#.b.#", "a.c", false},
	{"a.b.c", "a.b.c", true},
	{"a.b.c", "a.b.c.d", false},
	{"a.b.c", "a.b", false},
	{"a.b.#", "a.b.c.d", true},
	{"a.b.#", "a.b", true},
	{"a.b.#", "a.c", false},
	{"a.*.b", "a.x.b", true},
	{"a.*.b", "a.x.y.b", false},
	{"a.#.b", "a.x.y.b", true},
	{"a.#.b", "a.x.y.c", false},
	{"stock.*.nyse", "stock.usd.nyse", true},
	{"stock.#", "stock", true},
	{"Stock", "stock", false}, // case-sensitive
}

func TestTopicCases(t *testing.T) {
	for _, c := range topicCases {
		if got := trieMatches(c.pattern, c.key); got != c.want {
			t.Errorf("pattern %q key %q: trie says %v, want %v", c.pattern, c.key, got, c.want)
		}
		if got := refTopic(c.pattern, c.key); got != c.want {
			t.Errorf("pattern %q key %q: reference says %v, want %v", c.pattern, c.key, got, c.want)
		}
	}
}

func TestTopicSplit(t *testing.T) {
	cases := map[string][]string{
		"":     nil,
		".":    {"", ""},
		"a":    {"a"},
		"a.":   {"a", ""},
		".a":   {"", "a"},
		"a..b": {"a", "", "b"},
	}
	for k, want := range cases {
		if got := Split(k); !slices.Equal(got, want) {
			t.Errorf("Split(%q) = %q, want %q", k, got, want)
		}
	}
}

func TestTopicAddRemove(t *testing.T) {
	tr := New[string]()
	if !tr.Add("a.*", "q1") || !tr.Add("a.#", "q1") || !tr.Add("a.*", "q2") || !tr.Add("", "q3") {
		t.Fatal("add of new pair returned false")
	}
	if tr.Add("a.*", "q1") {
		t.Error("duplicate add returned true")
	}
	if tr.Len() != 4 {
		t.Errorf("len = %d, want 4", tr.Len())
	}
	if got := matchSet(tr, "a.b"); !slices.Equal(got, []string{"q1", "q2"}) {
		t.Errorf("match a.b = %v", got)
	}
	if got := matchSet(tr, ""); !slices.Equal(got, []string{"q3"}) {
		t.Errorf("match \"\" = %v", got)
	}
	// q1 is bound twice and both bindings match: reported twice.
	n := 0
	tr.Match("a.b", func(v string) {
		if v == "q1" {
			n++
		}
	})
	if n != 2 {
		t.Errorf("q1 reported %d times, want 2", n)
	}
	if tr.Remove("a.*", "q3") || tr.Remove("a.b", "q1") || tr.Remove("x", "q1") || tr.Remove("a", "q1") {
		t.Error("remove of absent pair returned true")
	}
	if !tr.Remove("a.*", "q1") {
		t.Fatal("remove returned false")
	}
	if tr.Remove("a.*", "q1") {
		t.Error("second remove returned true")
	}
	if got := matchSet(tr, "a.b"); !slices.Equal(got, []string{"q1", "q2"}) {
		t.Errorf("after remove, match a.b = %v", got)
	}
	tr.Remove("a.#", "q1")
	tr.Remove("a.*", "q2")
	tr.Remove("", "q3")
	if tr.Len() != 0 {
		t.Errorf("len = %d, want 0", tr.Len())
	}
	if !tr.root.empty() {
		t.Errorf("root not pruned: %+v", tr.root)
	}
}

func TestTopicPrune(t *testing.T) {
	tr := New[int]()
	tr.Add("a.b.c.d", 1)
	tr.Add("a.b", 2)
	tr.Add("a.*.#.x", 3)
	tr.Remove("a.b.c.d", 1)
	b := tr.root.children["a"].children["b"]
	if b == nil || b.children != nil {
		t.Fatalf("a.b.c.d not pruned back to a.b: %+v", b)
	}
	tr.Remove("a.*.#.x", 3)
	if tr.root.children["a"].star != nil {
		t.Error("a.* not pruned")
	}
	tr.Remove("a.b", 2)
	if !tr.root.empty() {
		t.Error("trie not empty")
	}
	// Nodes stay usable after pruning and re-adding.
	tr.Add("a.b", 4)
	if got := matchSet(tr, "a.b"); !slices.Equal(got, []int{4}) {
		t.Errorf("match = %v", got)
	}
}

// TestTopicManyValues exercises the value index kept by nodes bound by many
// values.
func TestTopicManyValues(t *testing.T) {
	tr := New[int]()
	const n = 1000
	for i := range n {
		if !tr.Add("#", i) {
			t.Fatalf("add %d", i)
		}
	}
	for i := range n {
		if tr.Add("#", i) {
			t.Fatalf("duplicate add %d", i)
		}
	}
	for i := 0; i < n; i += 2 {
		if !tr.Remove("#", i) {
			t.Fatalf("remove %d", i)
		}
	}
	got := matchSet(tr, "x.y")
	if len(got) != n/2 {
		t.Fatalf("matched %d values, want %d", len(got), n/2)
	}
	for _, v := range got {
		if v%2 == 0 {
			t.Fatalf("removed value %d still matches", v)
		}
	}
	for i := 1; i < n; i += 2 {
		if !tr.Remove("#", i) {
			t.Fatalf("remove %d", i)
		}
	}
	if tr.Len() != 0 || !tr.root.empty() {
		t.Fatal("trie not empty")
	}
}

func TestTopicMultipleBindings(t *testing.T) {
	tr := New[string]()
	bindings := map[string]string{
		"a.b.c": "exact", "a.*.c": "star", "a.#": "hash", "#": "all",
		"#.c": "endc", "*.*.*": "three", "b.#": "b", "": "empty", "#.#": "all2",
	}
	for k, v := range bindings {
		tr.Add(k, v)
	}
	for _, key := range []string{"", "a", "a.b.c", "a.x.c", "b", "c", "x.y.z", "a.b.c.d", "..", "a..c"} {
		var want []string
		for k, v := range bindings {
			if refTopic(k, key) {
				want = append(want, v)
			}
		}
		slices.Sort(want)
		if got := matchSet(tr, key); !slices.Equal(got, want) {
			t.Errorf("key %q: got %v, want %v", key, got, want)
		}
	}
}

// TestTopicRandom compares the trie with the reference matcher on random
// bindings and keys over a small alphabet, where collisions are frequent.
func TestTopicRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	patWords := []string{"a", "b", "", "*", "#", "#", "*"}
	keyWords := []string{"a", "b", "", "*", "#"}
	gen := func(words []string, max int) string {
		n := r.IntN(max + 1)
		w := make([]string, n)
		for i := range w {
			w[i] = words[r.IntN(len(words))]
		}
		return strings.Join(w, ".")
	}
	for round := 0; round < 200; round++ {
		tr := New[int]()
		var pats []string
		for i := 0; i < 1+r.IntN(40); i++ {
			p := gen(patWords, 7)
			pats = append(pats, p)
			tr.Add(p, i)
		}
		// Remove some bindings to exercise pruning.
		for i := range pats {
			if r.IntN(4) == 0 {
				if !tr.Remove(pats[i], i) {
					t.Fatalf("seed %d: remove(%q, %d) = false", seed, pats[i], i)
				}
				pats[i] = "\x00removed"
			}
		}
		for k := 0; k < 50; k++ {
			key := gen(keyWords, 8)
			var want []int
			for i, p := range pats {
				if p != "\x00removed" && refTopic(p, key) {
					want = append(want, i)
				}
			}
			if got := matchSet(tr, key); !slices.Equal(got, want) {
				t.Fatalf("seed %d: key %q: got %v, want %v (patterns %q)", seed, key, got, want, pats)
			}
		}
	}
}

// TestTopicHashBlowup checks that many '#' words do not make matching
// exponential, and that duplicate reports stay bounded.
func TestTopicHashBlowup(t *testing.T) {
	words := make([]string, 100)
	for i := range words {
		words[i] = "w"
	}
	key := strings.Join(words, ".")
	tr := New[int]()
	tr.Add("#.#.#.#.#.#.#.#.#.#.x", 1)
	tr.Add("#.#.#.#.#.#.#.#.#.#.w", 2)
	tr.Add("#.*.#.*.#.*.#.*.#.*.#", 3)
	tr.Add(strings.Repeat("#.", 30)+"#", 4)
	start := time.Now()
	calls := 0
	got := map[int]bool{}
	tr.Match(key, func(v int) { calls++; got[v] = true })
	if d := time.Since(start); d > time.Second {
		t.Errorf("match took %v", d)
	}
	if got[1] || !got[2] || !got[3] || !got[4] {
		t.Errorf("matched %v, want 2, 3 and 4", got)
	}
	if calls > 1000 {
		t.Errorf("fn called %d times", calls)
	}
	// Also more '#' nodes than the inline memo holds.
	tr2 := New[int]()
	for i := 1; i <= 40; i++ {
		tr2.Add(strings.Repeat("#.", i)+"w", i)
		tr2.Add(strings.Repeat("#.", i)+"x", -i)
	}
	got = map[int]bool{}
	tr2.Match(key, func(v int) { got[v] = true })
	for i := 1; i <= 40; i++ {
		if !got[i] || got[-i] {
			t.Fatalf("binding %d: matched %v", i, got)
		}
	}
}

func TestTopicMatchAllocs(t *testing.T) {
	tr := New[int]()
	for i := range 100 {
		tr.Add(fmt.Sprintf("stock.%d.*", i), i)
		tr.Add(fmt.Sprintf("#.%d", i), i)
	}
	tr.Add("#.#.#", 1000)
	n := 0
	fn := func(int) { n++ }
	allocs := testing.AllocsPerRun(100, func() {
		tr.Match("stock.42.nyse", fn)
		tr.Match("x.y.42", fn)
		tr.Match("", fn)
		tr.Match("a..b.", fn)
	})
	if allocs != 0 {
		t.Errorf("match allocates %v times per run", allocs)
	}
}

func benchTopic(b *testing.B, n int) {
	tr := New[int]()
	// A mix of exact, '*' and '#' bindings as an application would use.
	for i := range n {
		switch i % 4 {
		case 0:
			tr.Add(fmt.Sprintf("orders.%d.created", i), i)
		case 1:
			tr.Add(fmt.Sprintf("orders.%d.*", i), i)
		case 2:
			tr.Add(fmt.Sprintf("orders.#.%d", i), i)
		case 3:
			tr.Add(fmt.Sprintf("#.region%d.#", i), i)
		}
	}
	keys := []string{"orders.0.created", "orders.1.updated", "orders.eu.west.2", "logs.region3.error", "nomatch.at.all"}
	hits := 0
	fn := func(int) { hits++ }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		tr.Match(keys[i%len(keys)], fn)
	}
}

func BenchmarkTopicMatch1(b *testing.B)     { benchTopic(b, 1) }
func BenchmarkTopicMatch100(b *testing.B)   { benchTopic(b, 100) }
func BenchmarkTopicMatch10000(b *testing.B) { benchTopic(b, 10000) }

func BenchmarkTopicHashBlowup(b *testing.B) {
	words := make([]string, 100)
	for i := range words {
		words[i] = "w"
	}
	key := strings.Join(words, ".")
	tr := New[int]()
	tr.Add("#.#.#.#.#.#.#.#.#.#.x", 1)
	b.ReportAllocs()
	for b.Loop() {
		tr.Match(key, func(int) {})
	}
}

func BenchmarkTopicAddRemove10000(b *testing.B) {
	tr := New[int]()
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("orders.%d.*.#", i)
		tr.Add(keys[i], i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i % len(keys)
		tr.Remove(keys[k], k)
		tr.Add(keys[k], k)
	}
}
