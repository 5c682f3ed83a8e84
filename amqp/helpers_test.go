package amqp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// allMethods returns a new zero value of every method in the spec.
func allMethods() []Method {
	var ms []Method
	for c := 0; c < 256; c++ {
		for m := 0; m < 256; m++ {
			if x := NewMethod(uint16(c), uint16(m)); x != nil {
				ms = append(ms, x)
			}
		}
	}
	return ms
}

func sampleTable() Table {
	return Table{
		"bool":    true,
		"int8":    int8(-8),
		"uint8":   uint8(200),
		"int16":   int16(-1600),
		"uint16":  uint16(60000),
		"int32":   int32(-320000),
		"uint32":  uint32(4000000000),
		"int64":   int64(-1 << 40),
		"float32": float32(1.5),
		"float64": float64(-2.25),
		"decimal": Decimal{Scale: 2, Value: -12345},
		"string":  "héllo",
		"array":   []any{int32(1), "two", nil, []any{}, Table{}},
		"time":    time.Unix(1700000000, 0).UTC(),
		"table":   Table{"nested": Table{"deep": []byte{0, 1, 2}}},
		"void":    nil,
		"bytes":   []byte("raw"),
	}
}

// fill sets every field of the method pointed to by m to a distinctive
// non-zero value derived from seed.
func fill(m Method, seed int) {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		name := v.Type().Field(i).Name
		switch f.Interface().(type) {
		case uint8:
			f.SetUint(uint64(seed + i + 1))
		case uint16:
			f.SetUint(uint64(0x1200 + seed + i))
		case uint32:
			f.SetUint(uint64(0x12345600 + seed + i))
		case uint64:
			f.SetUint(uint64(0x1234567890abcd00) + uint64(seed+i))
		case bool:
			f.SetBool((i+seed)%2 == 0)
		case string:
			f.SetString(fmt.Sprintf("%s-%d", name, seed))
		case Table:
			f.Set(reflect.ValueOf(sampleTable()))
		case time.Time:
			f.Set(reflect.ValueOf(time.Unix(int64(1600000000+seed), 0).UTC()))
		default:
			panic("fill: unhandled type " + f.Type().String())
		}
	}
}

// wantCode checks that err is an *Error with the code and hardness.
func wantCode(t *testing.T, err error, code uint16, hard bool) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if e.Code != code || e.Hard != hard {
		t.Fatalf("error %v: code %d hard %v, want %d hard %v", e, e.Code, e.Hard, code, hard)
	}
	return e
}

// writeSeeds writes fuzz seed corpus files when WARREN_WRITE_SEEDS=1.
//
// Without WARREN_WRITE_SEEDS=1 it checks instead that the committed corpus
// holds every seed as built now (issue 12: the Seeds tests used to return
// silently, passing without checking anything).
func writeSeeds(t *testing.T, fuzzName string, seeds map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", fuzzName)
	write := os.Getenv("WARREN_WRITE_SEEDS") == "1"
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range seeds {
		path := filepath.Join(dir, "seed-"+name)
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if write {
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil {
			t.Errorf("%v: rerun with WARREN_WRITE_SEEDS=1 and commit the seed", err)
		} else if string(got) != data {
			t.Errorf("%s is out of date: rerun with WARREN_WRITE_SEEDS=1 and commit it", path)
		}
	}
}
