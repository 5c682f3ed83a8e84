// Package topic is the trie of a topic exchange: binding keys with the
// wildcards "*" and "#" matched against routing keys, with the semantics of
// RabbitMQ's topic exchange. It is generic over the bound values and holds
// no lock; package broker keeps one per topic exchange.
package topic

import "strings"

// Topic exchange routing, with the semantics of RabbitMQ's topic exchange
// (rabbit_exchange_type_topic and its trie in rabbit_db_topic_exchange /
// the 3.x mnesia trie):
//
//   - Binding and routing keys are split into words on '.'. The empty key
//     has zero words; otherwise every '.' separates two words and empty words
//     are allowed, so "a." is ["a", ""], "." is ["", ""] and "a..b" is
//     ["a", "", "b"]. (RabbitMQ's split_topic_key(<<>>) returns [].)
//   - In a binding key, the word "*" matches exactly one word (possibly the
//     empty word) and "#" matches zero or more words. There is no escaping:
//     those words are always wildcards. In a routing key they are ordinary
//     words.
//
// Consequences, all checked against RabbitMQ 3.10.8: binding "" matches only
// routing key ""; "#" and "#.#" match every key including ""; "*" does not
// match "" but matches "#" and "*"; ".#" matches "." and ".a" but not "" or
// "a"; "#.*.#" matches "." and "a" but not "".
//
// The trie has one node per distinct binding-key prefix. Matching walks the
// routing key by byte index without splitting it, and bounds the work done
// for '#' by remembering, per '#' node, the lowest key position from which it
// has already been expanded during the current match: expanding a '#' node
// from position p visits it at every position >= p, so a later expansion from
// p' >= p is redundant. Each '#' node is thus visited at most once per word
// position, which keeps patterns such as "#.#.#.#.#.#.x" linear in the key
// length instead of exponential.

// Trie maps topic binding keys to sets of values of type T (typically
// a queue or exchange reference). It is not safe for concurrent use; the
// caller holds the lock. Match does not modify the trie, so concurrent
// Match calls are safe while nothing calls Add or Remove.
type Trie[T comparable] struct {
	root trieNode[T]
	n    int
}

// valsIndexMin is the number of values a node holds before it keeps a
// map from value to slice position, so that Add and Remove stay O(1) for
// keys bound by many values (say "#" bound by thousands of queues).
const valsIndexMin = 16

type trieNode[T comparable] struct {
	parent   *trieNode[T]
	word     string // edge label from parent: a literal word, "*" or "#"
	children map[string]*trieNode[T]
	star     *trieNode[T] // child for "*"
	hash     *trieNode[T] // child for "#"
	vals     []T
	idx      map[T]int // position of each value in vals; nil while small
}

// New returns an empty trie.
func New[T comparable]() *Trie[T] {
	return &Trie[T]{}
}

// Len returns the number of (binding key, value) pairs in the trie.
func (t *Trie[T]) Len() int { return t.n }

// Split splits a key into words the way RabbitMQ does: "" has no
// words, and otherwise there is one more word than there are dots.
func Split(key string) []string {
	if key == "" {
		return nil
	}
	return strings.Split(key, ".")
}

func (n *trieNode[T]) child(w string) *trieNode[T] {
	switch w {
	case "*":
		return n.star
	case "#":
		return n.hash
	}
	return n.children[w]
}

func (n *trieNode[T]) empty() bool {
	return len(n.vals) == 0 && len(n.children) == 0 && n.star == nil && n.hash == nil
}

func (n *trieNode[T]) find(v T) int {
	if n.idx != nil {
		if i, ok := n.idx[v]; ok {
			return i
		}
		return -1
	}
	for i, x := range n.vals {
		if x == v {
			return i
		}
	}
	return -1
}

// Add binds v with bindingKey. It reports false if that pair was already
// present.
func (t *Trie[T]) Add(bindingKey string, v T) bool {
	n := &t.root
	for _, w := range Split(bindingKey) {
		c := n.child(w)
		if c == nil {
			c = &trieNode[T]{parent: n, word: w}
			switch w {
			case "*":
				n.star = c
			case "#":
				n.hash = c
			default:
				if n.children == nil {
					n.children = make(map[string]*trieNode[T])
				}
				n.children[w] = c
			}
		}
		n = c
	}
	if n.find(v) >= 0 {
		return false
	}
	n.vals = append(n.vals, v)
	if n.idx != nil {
		n.idx[v] = len(n.vals) - 1
	} else if len(n.vals) > valsIndexMin {
		n.idx = make(map[T]int, len(n.vals))
		for i, x := range n.vals {
			n.idx[x] = i
		}
	}
	t.n++
	return true
}

// Remove unbinds v from bindingKey. It reports false if the pair was not
// present. Nodes left without values or children are pruned.
func (t *Trie[T]) Remove(bindingKey string, v T) bool {
	n := &t.root
	for _, w := range Split(bindingKey) {
		if n = n.child(w); n == nil {
			return false
		}
	}
	i := n.find(v)
	if i < 0 {
		return false
	}
	last := len(n.vals) - 1
	if i != last {
		n.vals[i] = n.vals[last]
		if n.idx != nil {
			n.idx[n.vals[i]] = i
		}
	}
	var zero T
	n.vals[last] = zero // drop the reference for the garbage collector
	n.vals = n.vals[:last]
	if n.idx != nil {
		delete(n.idx, v)
		if len(n.vals) <= valsIndexMin/2 {
			n.idx = nil
		}
	}
	if len(n.vals) == 0 {
		n.vals = nil
	}
	t.n--
	for n.parent != nil && n.empty() {
		p := n.parent
		switch n.word {
		case "*":
			p.star = nil
		case "#":
			p.hash = nil
		default:
			delete(p.children, n.word)
			if len(p.children) == 0 {
				p.children = nil
			}
		}
		n.parent = nil
		n = p
	}
	return true
}

// Match calls fn for each value bound with a binding key that matches
// routingKey. A value is reported once per matching binding, and possibly
// more than once for one binding when several '#' expansions reach it; the
// caller deduplicates.
func (t *Trie[T]) Match(routingKey string, fn func(T)) {
	m := matcher[T]{key: routingKey, done: len(routingKey) + 1, fn: fn}
	start := 0
	if routingKey == "" {
		start = m.done // zero words
	}
	m.visit(&t.root, start)
}

// memoInline is how many '#' nodes a match tracks without allocating.
const memoInline = 16

type memoEntry[T comparable] struct {
	node *trieNode[T]
	low  int
}

// matcher is the state of one match call. Key positions are byte
// offsets where a word starts; a word ends at the next '.' or at the end of
// the key. Position len(key) is a valid position (an empty last word, as in
// "a."), and done = len(key)+1 means all words have been consumed.
type matcher[T comparable] struct {
	key  string
	done int
	fn   func(T)
	memo [memoInline]memoEntry[T]
	nm   int
	more map[*trieNode[T]]int // '#' nodes beyond the inline memo
}

// next returns the word at position pos (< done) and the position after it.
func (m *matcher[T]) next(pos int) (word string, after int) {
	rest := m.key[pos:]
	if i := strings.IndexByte(rest, '.'); i >= 0 {
		return rest[:i], pos + i + 1
	}
	return rest, m.done
}

// visit explores node n with the key consumed up to position pos.
func (m *matcher[T]) visit(n *trieNode[T], pos int) {
	if pos == m.done {
		for _, v := range n.vals {
			m.fn(v)
		}
		if n.hash != nil {
			m.expandHash(n.hash, pos) // '#' matching zero words
		}
		return
	}
	w, after := m.next(pos)
	if n.children != nil {
		if c := n.children[w]; c != nil {
			m.visit(c, after)
		}
	}
	if n.star != nil {
		m.visit(n.star, after)
	}
	if n.hash != nil {
		m.expandHash(n.hash, pos)
	}
}

// expandHash visits the '#' node h at every position from pos to done,
// skipping the positions already covered by an earlier expansion of h.
func (m *matcher[T]) expandHash(h *trieNode[T], pos int) {
	low := m.done + 1 // nothing expanded yet
	slot := -1
	for i := 0; i < m.nm; i++ {
		if m.memo[i].node == h {
			slot, low = i, m.memo[i].low
			break
		}
	}
	if slot < 0 && m.more != nil {
		if l, ok := m.more[h]; ok {
			low = l
		}
	}
	if pos >= low {
		return
	}
	switch {
	case slot >= 0:
		m.memo[slot].low = pos
	case low <= m.done: // found in more
		m.more[h] = pos
	case m.nm < memoInline:
		m.memo[m.nm] = memoEntry[T]{h, pos}
		m.nm++
	default:
		if m.more == nil {
			m.more = make(map[*trieNode[T]]int)
		}
		m.more[h] = pos
	}
	for p := pos; p < low; {
		m.visit(h, p)
		if p == m.done {
			break
		}
		_, p = m.next(p)
	}
}
