// Package erlhash computes Erlang's portable term hash, erlang:phash2/1,2,
// for a small set of Erlang terms modelled as Go values.
//
// RabbitMQ derives some identifiers from phash2 (for example the management
// API's "properties_key" of a binding with arguments), so Warren needs the
// bit-exact value. The algorithm follows make_hash2 in the Erlang runtime
// (erts/emulator/beam/erl_term_hashing.c, formerly utils.c), which has been
// stable across OTP releases; it was checked against OTP 25 on amd64.
//
// # Terms
//
// Erlang terms are written with these Go types:
//
//	Atom             an atom; its text is UTF-8, as OTP 20+ stores it
//	Binary, []byte   a byte-aligned binary
//	Tuple            {E1, ..., En}
//	List, nil        a proper list [E1, ..., En]; nil and List{} are []
//	int, int8 ... int64, uint, uint8 ... uint64, *big.Int
//	                 an integer (small or big, any sign)
//	float64          a float (-0.0 hashes like 0.0, as in Erlang)
//
// Anything else - including Go strings, which would be ambiguous between a
// binary, a charlist and an atom - is not an Erlang term in this model, and
// Phash2 panics on it. So it does for NaN and infinities, which Erlang floats
// cannot hold, and for a nil *big.Int. Maps, pids, ports, references, funs,
// improper lists and bitstrings that are not a whole number of bytes are not
// supported.
//
// Erlang makes no difference between integer representations, and neither
// does Phash2: int(7), uint64(7) and big.NewInt(7) hash alike, and all of
// them count as "bytes" in the string optimisation applied to lists whose
// elements are integers in 0..255.
package erlhash

import (
	"fmt"
	"math"
	"math/big"
)

// Atom is an Erlang atom, given by its text.
type Atom string

// Binary is an Erlang binary (a byte-aligned bitstring).
type Binary []byte

// Tuple is an Erlang tuple {A, B, ...}.
type Tuple []any

// List is a proper Erlang list [A, B, ...]; nil and List{} are the empty
// list [].
type List []any

// Phash2 returns erlang:phash2(Term, 1 bsl 32), the full 32-bit portable
// hash of term. erlang:phash2(Term, Range) for a smaller Range is
// Phash2(term) % Range; erlang:phash2(Term) is Phash2(term) & (1<<27 - 1).
//
// Phash2 panics if term contains a value that is not one of the supported
// terms listed in the package documentation.
func Phash2(term any) uint32 {
	var h hasher
	h.term(term)
	return h.hash
}

// goldenRatio is the initial value of the Jenkins mixer's a and b words;
// the kN constants below are goldenRatio*N mod 2^32, used to tell term
// kinds apart.
const (
	goldenRatio = 0x9e3779b9
	kNil        = goldenRatio * 2 & 0xffffffff
	kAtom       = goldenRatio * 3 & 0xffffffff
	kString     = goldenRatio * 4 & 0xffffffff
	kTuple      = goldenRatio * 9 & 0xffffffff
	kNegBig     = goldenRatio * 10 & 0xffffffff
	kPosBig     = goldenRatio * 11 & 0xffffffff
	kFloat      = goldenRatio * 12 & 0xffffffff
	kBinary     = goldenRatio * 13 & 0xffffffff

	// nilFirst is the hash of [] when nothing has been hashed before it.
	nilFirst = 3468870702
	// nilTag is the runtime's internal type number of [], mixed in when
	// [] is not the first thing hashed.
	nilTag = 2
)

// mix is Bob Jenkins' 96-bit mixing step (lookup2).
func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= b
	a -= c
	a ^= c >> 13
	b -= c
	b -= a
	b ^= a << 8
	c -= a
	c -= b
	c ^= b >> 13
	a -= b
	a -= c
	a ^= c >> 12
	b -= c
	b -= a
	b ^= a << 16
	c -= a
	c -= b
	c ^= b >> 5
	a -= b
	a -= c
	a ^= c >> 3
	b -= c
	b -= a
	b ^= a << 10
	c -= a
	c -= b
	c ^= b >> 15
	return a, b, c
}

// hasher carries the running hash through a depth-first, left-to-right walk
// of the term, which is the order in which the runtime visits subterms.
type hasher struct {
	hash uint32
}

// mix2 folds two 32-bit words, each offset by k, into the running hash.
func (h *hasher) mix2(x, y, k uint32) {
	_, _, h.hash = mix(k+x, k+y, h.hash)
}

func (h *hasher) mix1(x, k uint32) { h.mix2(x, 0, k) }

func (h *hasher) term(t any) {
	switch v := t.(type) {
	case Atom:
		h.atom(v)
	case Binary:
		h.binary(v)
	case []byte:
		h.binary(v)
	case Tuple:
		h.mix1(uint32(len(v)), kTuple)
		for _, e := range v {
			h.term(e)
		}
	case List:
		h.list(v)
	case nil:
		h.list(nil)
	case float64:
		h.float(v)
	case int:
		h.int64(int64(v))
	case int8:
		h.int64(int64(v))
	case int16:
		h.int64(int64(v))
	case int32:
		h.int64(int64(v))
	case int64:
		h.int64(v)
	case uint:
		h.uint64(uint64(v), false)
	case uint8:
		h.uint64(uint64(v), false)
	case uint16:
		h.uint64(uint64(v), false)
	case uint32:
		h.uint64(uint64(v), false)
	case uint64:
		h.uint64(v, false)
	case *big.Int:
		if v == nil {
			panic("erlhash: nil *big.Int is not an Erlang term")
		}
		h.bigInt(v)
	default:
		panic(fmt.Sprintf("erlhash: unsupported term type %T", t))
	}
}

// atomHash is the hash the runtime stores with each atom: hashpjw over the
// atom's UTF-8 text, except that two-byte sequences for U+0080..U+00FF are
// first folded back to their single Latin-1 byte (so atoms that could be
// written in Latin-1 hash as they did before atoms became Unicode).
func atomHash(name string) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		v := name[i]
		if i+1 < len(name) && v&0xfe == 0xc2 && name[i+1]&0xc0 == 0x80 {
			v = v<<6 | name[i+1]&0x3f
			i++
		}
		h = h<<4 + uint32(v)
		if g := h & 0xf0000000; g != 0 {
			h ^= g >> 24
			h ^= g
		}
	}
	return h
}

func (h *hasher) atom(a Atom) {
	ah := atomHash(string(a))
	if h.hash == 0 {
		h.hash = ah
	} else {
		h.mix1(ah, kAtom)
	}
}

func (h *hasher) empty() {
	if h.hash == 0 {
		h.hash = nilFirst
	} else {
		h.mix1(nilTag, kNil)
	}
}

// list hashes a proper list. Runs of elements that are integers in 0..255
// are packed four to a word before mixing; any other element ends the run
// and is hashed on its own. The list's terminating [] is hashed last.
func (h *hasher) list(l List) {
	var packed uint32
	n := 0
	for _, e := range l {
		if b, ok := byteValue(e); ok {
			packed = packed<<8 + uint32(b)
			n++
			if n == 4 {
				h.mix1(packed, kString)
				packed, n = 0, 0
			}
			continue
		}
		if n > 0 {
			h.mix1(packed, kString)
			packed, n = 0, 0
		}
		h.term(e)
	}
	if n > 0 {
		h.mix1(packed, kString)
	}
	h.empty()
}

// byteValue reports whether t is an integer in 0..255, and which.
func byteValue(t any) (byte, bool) {
	var v int64
	switch x := t.(type) {
	case int:
		v = int64(x)
	case int8:
		v = int64(x)
	case int16:
		v = int64(x)
	case int32:
		v = int64(x)
	case int64:
		v = x
	case uint:
		return byte(x), x <= 255
	case uint8:
		return x, true
	case uint16:
		return byte(x), x <= 255
	case uint32:
		return byte(x), x <= 255
	case uint64:
		return byte(x), x <= 255
	case *big.Int:
		if x == nil || !x.IsInt64() {
			return 0, false
		}
		v = x.Int64()
	default:
		return 0, false
	}
	return byte(v), v >= 0 && v <= 255
}

func (h *hasher) int64(v int64) {
	if v >= -1<<27 && v < 1<<27 {
		// Integers that fit in 28 bits: the magnitude of a negative one
		// is mixed in before its two's complement.
		if v < 0 {
			h.mix1(uint32(-v), goldenRatio)
		}
		h.mix1(uint32(v), goldenRatio)
		return
	}
	if v < 0 {
		h.uint64(uint64(-(v+1))+1, true) // also right for math.MinInt64
	} else {
		h.uint64(uint64(v), false)
	}
}

// uint64 hashes the integer whose magnitude is m and whose sign is neg.
func (h *hasher) uint64(m uint64, neg bool) {
	if m < 1<<27 || (neg && m == 1<<27) {
		v := int64(m)
		if neg {
			v = -v
		}
		h.int64(v)
		return
	}
	k := uint32(kPosBig)
	if neg {
		k = kNegBig
	}
	h.mix2(uint32(m), uint32(m>>32), k)
}

// bigInt hashes an arbitrary integer. Integers outside 28 bits are hashed
// as their magnitude in 64-bit little-endian digits, each digit mixed as
// its low and high 32-bit halves, with a constant that carries the sign.
func (h *hasher) bigInt(x *big.Int) {
	if x.IsInt64() {
		h.int64(x.Int64())
		return
	}
	k := uint32(kPosBig)
	if x.Sign() < 0 {
		k = kNegBig
	}
	mag := new(big.Int).Abs(x).Bytes() // big-endian, no leading zeros
	for end := len(mag); end > 0; end -= 8 {
		var d uint64
		for i := max(0, end-8); i < end; i++ {
			d = d<<8 | uint64(mag[i])
		}
		h.mix2(uint32(d), uint32(d>>32), k)
	}
}

func (h *hasher) float(f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		panic(fmt.Sprintf("erlhash: %v is not an Erlang float", f))
	}
	if f == 0 {
		f = 0 // -0.0 hashes as 0.0
	}
	bits := math.Float64bits(f)
	h.mix2(uint32(bits>>32), uint32(bits), kFloat)
}

// binary hashes the bytes with Jenkins' lookup2 block hash, seeded with the
// running hash.
func (h *hasher) binary(b []byte) {
	if uint64(len(b)) > math.MaxUint32 {
		// The runtime truncates a binary's size to 32 bits here.
		b = b[:uint32(len(b))]
	}
	seed := kBinary + h.hash
	if len(b) == 0 {
		h.hash = seed
		return
	}
	h.hash = blockHash(b, seed)
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func blockHash(b []byte, seed uint32) uint32 {
	a, bb, c := uint32(goldenRatio), uint32(goldenRatio), seed
	n := len(b)
	for len(b) >= 12 {
		a += le32(b[0:])
		bb += le32(b[4:])
		c += le32(b[8:])
		a, bb, c = mix(a, bb, c)
		b = b[12:]
	}
	// The length goes into the low byte of c; the remaining 0..11 bytes
	// fill a, b and the upper three bytes of c, little-endian.
	c += uint32(n)
	var tail [12]byte
	copy(tail[:], b)
	a += le32(tail[0:])
	bb += le32(tail[4:])
	c += le32(tail[8:]) << 8
	_, _, c = mix(a, bb, c)
	return c
}
