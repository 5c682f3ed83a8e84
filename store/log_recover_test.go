package store

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecovery checks each documented recovery case on hand-made damage.
func TestRecovery(t *testing.T) {
	const segSize = 512
	// build writes 3 full segments and a partial fourth (active) one.
	build := func(t *testing.T) (*MemFS, []rec) {
		fs := NewMemFS()
		l := mustOpen(t, "/q", Options{FS: fs, SegmentSize: segSize})
		var all []rec
		for i := range 20 {
			all = append(all, mustAppend(t, l, byte(i), bytes.Repeat([]byte{byte(i)}, 91))) // 100-byte records, 5 per segment
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := l.Segments(); len(got) != 4 {
			t.Fatalf("setup: segments %v, want 4", got)
		}
		return fs, all
	}
	path := func(seg int) string { return filepath.Join("/q", segName(uint32(seg))) }
	edit := func(t *testing.T, fs *MemFS, seg int, f func([]byte) []byte) {
		t.Helper()
		data, err := fs.ReadFile(path(seg))
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile(path(seg), f(data)); err != nil {
			t.Fatal(err)
		}
	}
	without := func(all []rec, drop func(r rec) bool) []rec {
		var out []rec
		for _, r := range all {
			if !drop(r) {
				out = append(out, r)
			}
		}
		return out
	}
	recEnd := func(r rec) int { return int(r.pos.Off) + recHeaderSize + len(r.payload) }
	tests := []struct {
		name     string
		damage   func(t *testing.T, fs *MemFS, all []rec)
		want     func(all []rec) []rec
		warn     string              // in the log output
		fileSize func(all []rec) int // of the last segment after recovery (nil: do not check)
	}{
		{
			name:   "clean",
			damage: func(*testing.T, *MemFS, []rec) {},
			want:   func(all []rec) []rec { return all },
		},
		{
			name: "torn record header at the tail",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte { return append(b, 5, 0, 0) })
			},
			want:     func(all []rec) []rec { return all },
			warn:     "cutting torn or corrupt tail",
			fileSize: func(all []rec) int { return recEnd(all[19]) },
		},
		{
			name: "torn payload of the last record",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte { return b[:len(b)-10] })
			},
			want:     func(all []rec) []rec { return all[:19] },
			warn:     "cutting torn or corrupt tail",
			fileSize: func(all []rec) int { return recEnd(all[18]) },
		},
		{
			// Blocks written back out of order before a crash: a hole, then
			// good records. The hole is skipped, the records after it are
			// kept (they were appended; nothing after them is cut).
			name: "zeroed hole before good records in the last segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte { clear(b[all[16].pos.Off : all[16].pos.Off+20]); return b })
			},
			want:     func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos == all[16].pos }) },
			warn:     "skipping a corrupt record",
			fileSize: func(all []rec) int { return recEnd(all[19]) },
		},
		{
			// Issue 11 item 8: four bytes of one body changed, its length
			// intact. Only that record is lost, in an older segment ...
			name: "corrupt record in an older segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 1, func(b []byte) []byte { b[all[7].pos.Off+recHeaderSize+3] ^= 0x40; return b })
			},
			want: func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos == all[7].pos }) },
			warn: "skipping a corrupt record",
		},
		{
			// ... and in the last (active) segment.
			name: "corrupt body in the middle of the last segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte {
					o := all[16].pos.Off + recHeaderSize + 10
					for i := range 4 {
						b[o+uint32(i)] ^= 0xFF
					}
					return b
				})
			},
			want:     func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos == all[16].pos }) },
			warn:     "skipping a corrupt record",
			fileSize: func(all []rec) int { return recEnd(all[19]) },
		},
		{
			// A damaged length field: the record boundary is lost, the scan
			// for the next record finds it.
			name: "corrupt length in the middle of the last segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte { b[all[16].pos.Off+1] ^= 0x01; return b })
			},
			want:     func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos == all[16].pos }) },
			warn:     "skipping a corrupt record",
			fileSize: func(all []rec) int { return recEnd(all[19]) },
		},
		{
			name: "two damaged records in a row",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 1, func(b []byte) []byte {
					b[all[6].pos.Off+recHeaderSize] ^= 1
					b[all[7].pos.Off+recHeaderSize] ^= 1
					return b
				})
			},
			want: func(all []rec) []rec {
				return without(all, func(r rec) bool { return r.pos == all[6].pos || r.pos == all[7].pos })
			},
			warn: "skipping a corrupt record",
		},
		{
			// The last record of an older segment: nothing follows it in
			// its segment, so the rest of the segment (that record) goes.
			name: "corrupt last record of an older segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 1, func(b []byte) []byte { b[all[9].pos.Off+recHeaderSize+3] ^= 0x40; return b })
			},
			want: func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos == all[9].pos }) },
			warn: "corrupt record at the end of an older segment",
		},
		{
			// Damage in the middle and a torn tail: the damage is skipped,
			// the tail cut.
			name: "damaged record and a torn tail in the last segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte {
					b[all[16].pos.Off+recHeaderSize+3] ^= 0x40
					return b[:len(b)-10]
				})
			},
			want: func(all []rec) []rec {
				return without(all, func(r rec) bool { return r.pos == all[16].pos || r.pos == all[19].pos })
			},
			warn:     "cutting torn or corrupt tail",
			fileSize: func(all []rec) int { return recEnd(all[18]) },
		},
		{
			// Garbage after the last record (a torn write of random bytes)
			// holds no pair of valid records: it is a tail, and cut.
			name: "garbage tail in the last segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte {
					g := make([]byte, 300)
					for i := range g {
						g[i] = byte(i*7 + 3)
					}
					return append(b, g...)
				})
			},
			want:     func(all []rec) []rec { return all },
			warn:     "cutting torn or corrupt tail",
			fileSize: func(all []rec) int { return recEnd(all[19]) },
		},
		{
			name: "bad header of an older segment",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 2, func(b []byte) []byte { b[0] = 'X'; return b })
			},
			want: func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos.Seg == 2 }) },
			warn: "bad header",
		},
		{
			name: "older segment missing",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				if err := fs.Remove(path(1)); err != nil {
					t.Fatal(err)
				}
			},
			want: func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos.Seg == 1 }) },
		},
		{
			name: "last segment empty (crash right after a roll)",
			damage: func(t *testing.T, fs *MemFS, all []rec) {
				edit(t, fs, 3, func(b []byte) []byte { return nil })
			},
			want:     func(all []rec) []rec { return without(all, func(r rec) bool { return r.pos.Seg == 3 }) },
			fileSize: func(all []rec) int { return segHeaderSize },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, all := build(t)
			tt.damage(t, fs, all)
			rep := &recorder{}
			opts := Options{FS: fs, SegmentSize: segSize, Logger: rep.logger()}
			l := mustOpen(t, "/q", opts)
			want := tt.want(all)
			checkRecords(t, scanAll(t, l), want)
			checkReadAt(t, l, want)
			// ScanFrom each kept record (after a skipped range too) sees
			// the rest.
			for i, r := range want {
				var got []rec
				if err := l.ScanFrom(r.pos, func(p Pos, typ byte, payload []byte) error {
					got = append(got, rec{p, typ, bytes.Clone(payload)})
					return nil
				}); err != nil {
					t.Fatalf("ScanFrom(%v): %v", r.pos, err)
				}
				checkRecords(t, got, want[i:])
			}
			out := strings.Join(rep.lines, "\n")
			if tt.warn != "" && !strings.Contains(out, tt.warn) {
				t.Errorf("log output %q does not report %q", out, tt.warn)
			}
			if tt.warn == "" && strings.Contains(out, "WARN") {
				t.Errorf("unexpected warning: %s", out)
			}
			if tt.fileSize != nil {
				data, _ := fs.ReadFile(path(3))
				if len(data) != tt.fileSize(all) {
					t.Errorf("last segment has %d bytes after recovery, want %d", len(data), tt.fileSize(all))
				}
			}
			// Appends continue, and survive a reopen after the damage.
			more := mustAppend(t, l, 0xEE, []byte("after recovery"))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, "/q", opts)
			defer l.Close()
			checkRecords(t, scanAll(t, l), append(want, more))
		})
	}
}
