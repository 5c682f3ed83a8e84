package erlhash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// propertiesKey builds RabbitMQ's management-API name for a binding with
// arguments: routing key, "~", then base64url (unpadded) of the 32-bit
// big-endian phash2 of the argument list.
func propertiesKey(routingKey string, args List) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], Phash2(args))
	return routingKey + "~" + base64.RawURLEncoding.EncodeToString(b[:])
}

func bigFromString(s string) *big.Int {
	x, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic(s)
	}
	return x
}

// Expected values were produced by erlang:phash2(T, 1 bsl 32) on OTP 25.
var fixed = []struct {
	name string
	term any
	want uint32
}{
	{"rabbit headers args", List{
		Tuple{Binary("a"), Atom("longstr"), Binary("1")},
		Tuple{Binary("n"), Atom("long"), 2},
		Tuple{Binary("x-match"), Atom("longstr"), Binary("any")},
	}, 2274830720},
	{"rabbit x-arg", List{Tuple{Binary("x-arg"), Atom("longstr"), Binary("v")}}, 3809898491},
	{"[]", List{}, 3468870702},
	{"nil list", nil, 3468870702},
	{"a", Atom("a"), 97},
	{"latin1 atom é", Atom("é"), 233},
	{"0", 0, 3175731469},
	{"-1", -1, 1117813597},
	{"2^27", 1 << 27, 2562491755},
	{"-2^27", -(1 << 27), 874979335},
	{"2^64", bigFromString("18446744073709551616"), 2519041713},
	{"-2^64", bigFromString("-18446744073709551616"), 2563594619},
	{"1.5", 1.5, 2023646235},
	{"0.0", 0.0, 423528920},
	{"-0.0", math.Copysign(0, -1), 423528920},
	{"<<>>", Binary{}, 147926629},
	{"{}", Tuple{}, 221703996},
	{"\"abc\"", List{97, 98, 99}, 519996486},
	{"[a]", List{Atom("a")}, 1634476877},
	{"{[]}", Tuple{List{}}, 1775079505},
}

func TestFixed(t *testing.T) {
	for _, c := range fixed {
		if got := Phash2(c.term); got != c.want {
			t.Errorf("%s: Phash2 = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestRabbitMQPropertiesKey(t *testing.T) {
	args := List{
		Tuple{Binary("a"), Atom("longstr"), Binary("1")},
		Tuple{Binary("n"), Atom("long"), int64(2)},
		Tuple{Binary("x-match"), Atom("longstr"), Binary("any")},
	}
	if got, want := propertiesKey("", args), "~h5cpgA"; got != want {
		t.Errorf("headers binding: %q, want %q", got, want)
	}
	args = List{Tuple{Binary("x-arg"), Atom("longstr"), Binary("v")}}
	if got, want := propertiesKey("rk", args), "rk~4xZv-w"; got != want {
		t.Errorf("x-arg binding: %q, want %q", got, want)
	}
}

// Erlang does not tell integer representations apart; neither may Phash2.
func TestIntegerRepresentations(t *testing.T) {
	for _, v := range []int64{0, 1, 255, 256, -1, 1 << 27, -(1 << 27), 1<<27 - 1, -(1 << 27) - 1,
		1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64} {
		want := Phash2(v)
		if got := Phash2(big.NewInt(v)); got != want {
			t.Errorf("%d: *big.Int %d, int64 %d", v, got, want)
		}
		if got := Phash2(int(v)); got != want {
			t.Errorf("%d: int %d, int64 %d", v, got, want)
		}
		if v >= 0 {
			if got := Phash2(uint64(v)); got != want {
				t.Errorf("%d: uint64 %d, int64 %d", v, got, want)
			}
		}
		// In lists, 0..255 take the string path whatever the Go type.
		if got, want := Phash2(List{big.NewInt(v), Atom("x")}), Phash2(List{v, Atom("x")}); got != want {
			t.Errorf("[%d, x]: *big.Int %d, int64 %d", v, got, want)
		}
	}
	if Phash2(Binary("ab")) != Phash2([]byte("ab")) {
		t.Error("Binary and []byte differ")
	}
}

func TestUnsupportedPanics(t *testing.T) {
	for _, term := range []any{"string", 1.5 + 2i, math.NaN(), math.Inf(1), (*big.Int)(nil),
		map[string]any{}, List{1, struct{}{}}, float32(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Phash2(%#v) did not panic", term)
				}
			}()
			Phash2(term)
		}()
	}
}

// ---- differential test against the local Erlang VM ----

type gen struct{ r *rand.Rand }

var atomPool = []string{
	"", "a", "longstr", "x-match", "ok", "Hello World", "it's", `back\slash`,
	"é", "ÿ", "Ωmega", "日本", "💥", "naïve café", "\u0080", "\u00ff\u0100",
}

func (g gen) atom() Atom {
	if g.r.Intn(3) == 0 {
		return Atom(atomPool[g.r.Intn(len(atomPool))])
	}
	n := g.r.Intn(12)
	var sb strings.Builder
	for range n {
		switch g.r.Intn(6) {
		case 0:
			sb.WriteRune(rune(0x80 + g.r.Intn(0x80))) // Latin-1 supplement
		case 1:
			sb.WriteRune(rune(0x100 + g.r.Intn(0x2000)))
		case 2:
			sb.WriteRune(rune(0x10000 + g.r.Intn(0x1000)))
		default:
			sb.WriteRune(rune(0x20 + g.r.Intn(0x5f))) // printable ASCII
		}
	}
	return Atom(sb.String())
}

func (g gen) binary() Binary {
	b := make(Binary, g.r.Intn(101))
	for i := range b {
		b[i] = byte(g.r.Intn(256))
	}
	return b
}

var intEdges = func() []any {
	var out []any
	for _, e := range []uint{0, 1, 8, 27, 28, 31, 32, 59, 60, 63} {
		p := int64(1) << e
		if e == 63 {
			out = append(out, int64(math.MaxInt64), int64(math.MinInt64), uint64(1)<<63, uint64(math.MaxUint64))
			continue
		}
		out = append(out, p, -p, p-1, -p+1, p+1, -p-1)
	}
	out = append(out, 255, 256, 2)
	for _, s := range []string{"18446744073709551616", "-18446744073709551616",
		"18446744073709551615", "-18446744073709551615", "-9223372036854775809",
		"340282366920938463463374607431768211456", "-340282366920938463463374607431768211455"} {
		out = append(out, bigFromString(s))
	}
	return out
}()

func (g gen) integer() any {
	switch g.r.Intn(6) {
	case 0, 1:
		return intEdges[g.r.Intn(len(intEdges))]
	case 2:
		return g.r.Intn(256) // a byte
	case 3:
		// random magnitude up to 64 bits, either sign
		v := g.r.Int63() >> g.r.Intn(63)
		if g.r.Intn(2) == 0 {
			v = -v
		}
		return v
	case 4:
		return big.NewInt(g.r.Int63n(1000) - 500) // small value, big type
	default:
		// bignum of 65..300 bits
		x := new(big.Int).Rand(g.r, new(big.Int).Lsh(big.NewInt(1), uint(65+g.r.Intn(236))))
		x.SetBit(x, 64, 1)
		if g.r.Intn(2) == 0 {
			x.Neg(x)
		}
		return x
	}
}

var floatEdges = []float64{0, math.Copysign(0, -1), 1.5, -1.5, -1e300, 1e300, 1, -1, 0.1,
	math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 1 << 53, 123456789.125}

func (g gen) float() float64 {
	if g.r.Intn(2) == 0 {
		return floatEdges[g.r.Intn(len(floatEdges))]
	}
	f := math.Float64frombits(g.r.Uint64())
	for math.IsNaN(f) || math.IsInf(f, 0) {
		f = math.Float64frombits(g.r.Uint64())
	}
	if g.r.Intn(2) == 0 {
		f = g.r.NormFloat64() * math.Pow(10, float64(g.r.Intn(20)-10))
	}
	return f
}

func (g gen) term(depth int) any {
	k := g.r.Intn(10)
	if depth >= 4 {
		k = g.r.Intn(5)
	}
	switch k {
	case 0:
		return g.atom()
	case 1:
		return g.binary()
	case 2, 3:
		return g.integer()
	case 4:
		return g.float()
	case 5, 6:
		t := make(Tuple, g.r.Intn(5))
		for i := range t {
			t[i] = g.term(depth + 1)
		}
		return t
	default:
		n := g.r.Intn(8)
		if n == 0 && g.r.Intn(2) == 0 {
			return nil
		}
		l := make(List, n)
		stringy := g.r.Intn(2) == 0 // mostly bytes: exercises the packed runs
		for i := range l {
			if stringy && g.r.Intn(5) != 0 {
				l[i] = g.r.Intn(256)
			} else {
				l[i] = g.term(depth + 1)
			}
		}
		return l
	}
}

// erlSource renders t as an Erlang term literal, ASCII only.
func erlSource(sb *strings.Builder, t any) {
	switch v := t.(type) {
	case Atom:
		sb.WriteByte('\'')
		for _, r := range string(v) {
			switch {
			case r == '\'' || r == '\\':
				sb.WriteByte('\\')
				sb.WriteRune(r)
			case r >= 0x20 && r < 0x7f:
				sb.WriteRune(r)
			default:
				fmt.Fprintf(sb, `\x{%X}`, r)
			}
		}
		sb.WriteByte('\'')
	case Binary:
		sb.WriteString("<<")
		for i, b := range v {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Itoa(int(b)))
		}
		sb.WriteString(">>")
	case Tuple:
		sb.WriteByte('{')
		for i, e := range v {
			if i > 0 {
				sb.WriteByte(',')
			}
			erlSource(sb, e)
		}
		sb.WriteByte('}')
	case List:
		sb.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				sb.WriteByte(',')
			}
			erlSource(sb, e)
		}
		sb.WriteByte(']')
	case nil:
		sb.WriteString("[]")
	case float64:
		s := strconv.FormatFloat(v, 'e', -1, 64) // shortest round-trip form
		mant, exp, _ := strings.Cut(s, "e")
		if !strings.Contains(mant, ".") {
			mant += ".0" // Erlang floats need digits on both sides of the point
		}
		sb.WriteString(mant + "e" + exp)
	case *big.Int:
		sb.WriteString(v.String())
	default:
		fmt.Fprintf(sb, "%d", v) // the Go integer types
	}
}

func TestDifferentialAgainstErl(t *testing.T) {
	erl, err := exec.LookPath("erl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("erl not found (%v); CI=true requires the differential test against Erlang", err)
		}
		t.Skipf("erl not found (%v): skipping differential test against erlang:phash2/2; install Erlang/OTP to run it", err)
	}

	const n = 4000
	g := gen{rand.New(rand.NewSource(20250611))}
	terms := make([]any, n)
	var src strings.Builder
	src.WriteString("%% -*- coding: utf-8 -*-\n")
	for i := range terms {
		terms[i] = g.term(0)
		erlSource(&src, terms[i])
		src.WriteString(".\n")
	}

	dir := t.TempDir()
	in, out := filepath.Join(dir, "terms.txt"), filepath.Join(dir, "hashes.txt")
	if err := os.WriteFile(in, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	eval := fmt.Sprintf(`{ok, Ts} = file:consult(%q), `+
		`ok = file:write_file(%q, [[integer_to_list(erlang:phash2(T, 1 bsl 32)), $\n] || T <- Ts]), `+
		`halt().`, in, out)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, erl, "-noshell", "-eval", eval)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("erl: %v\n%s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}

	sc := bufio.NewScanner(bytes.NewReader(data))
	i, bad := 0, 0
	for sc.Scan() {
		if i >= n {
			t.Fatalf("erl returned more than %d hashes", n)
		}
		want, err := strconv.ParseUint(sc.Text(), 10, 32)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if got := Phash2(terms[i]); got != uint32(want) {
			bad++
			if bad <= 10 {
				var sb strings.Builder
				erlSource(&sb, terms[i])
				t.Errorf("term %d: Phash2 = %d, erl says %d for %s", i, got, want, sb.String())
			}
		}
		i++
	}
	if i != n {
		t.Fatalf("erl returned %d hashes for %d terms", i, n)
	}
	if bad > 0 {
		t.Fatalf("%d of %d terms hash differently from erl", bad, n)
	}
	t.Logf("%d random terms hash as erlang:phash2/2 does", n)
}
