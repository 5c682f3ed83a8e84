package qraft

import (
	"bytes"
	"testing"
)

// issue 14 (faster quorum publishing): a local snapshot encoded straight
// from its live refs is byte for byte the snapData encoding, and decodes
// back to the same state, live entries and names.
func TestEncodeLocalMatchesEncode(t *testing.T) {
	for _, n := range []int{0, 1, 300} {
		refs := make([]liveRef, n)
		sd := &snapData{sm: bytes.Repeat([]byte("s"), 200+n), names: map[uint64]string{7: "n7", 1: "n1", 1 << 40: "far"}}
		for i := range refs {
			refs[i] = liveRef{index: uint64(10 + 3*i), term: uint64(1 + i/100), pos: recPos{}, size: 9}
			sd.live = append(sd.live, liveEnt{index: refs[i].index, term: refs[i].term})
		}
		got, want := encodeLocal(sd.sm, refs, sd.names), sd.encode(false)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d live: encodeLocal differs from encode(false)", n)
		}
		back, err := decodeSnapData(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.sm, sd.sm) || len(back.live) != n || len(back.names) != 3 || back.names[1<<40] != "far" {
			t.Fatalf("%d live: decoded %d live, names %v", n, len(back.live), back.names)
		}
		for i, l := range back.live {
			if l.index != refs[i].index || l.term != refs[i].term || l.hasData {
				t.Fatalf("live %d: %+v, want %+v", i, l, refs[i])
			}
		}
	}
}
