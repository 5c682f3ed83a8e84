package broker

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"testing"

	"github.com/warrenmq/warren/streamlog"
)

// A sub-batch's records decompress within the size it announces; one that
// lies about its size, is not what its codec says, or names no codec is
// skipped, never a panic or an allocation of what it announces.
func TestSubBatchRecordsHostile(t *testing.T) {
	var plain []byte
	for _, r := range []string{"a", "bb", "ccc"} {
		plain = binary.BigEndian.AppendUint32(plain, uint32(len(r)))
		plain = append(plain, r...)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(plain)
	w.Close()
	ok := streamlog.Entry{SubBatch: true, Compression: compressGzip, Records: 3, Plain: uint32(len(plain)), Data: gz.Bytes()}
	if recs := subBatchRecords(ok); len(recs) != 3 || string(recs[2]) != "ccc" {
		t.Fatalf("gzip sub-batch: %q", recs)
	}
	for name, e := range map[string]streamlog.Entry{
		"size above the chunk limit": {Compression: compressGzip, Records: 3, Plain: streamlog.MaxChunkData + 1, Data: gz.Bytes()},
		"size above what it holds":   {Compression: compressGzip, Records: 3, Plain: uint32(len(plain)) + 100, Data: gz.Bytes()},
		"gzip garbage":               {Compression: compressGzip, Records: 3, Plain: 10, Data: []byte("not gzip at all")},
		"snappy garbage":             {Compression: compressSnappy, Records: 3, Plain: 10, Data: []byte("not snappy")},
		"lz4 garbage":                {Compression: compressLz4, Records: 3, Plain: 10, Data: []byte("not lz4 frames")},
		"zstd garbage":               {Compression: compressZstd, Records: 3, Plain: 10, Data: []byte("not zstd")},
		"unknown codec":              {Compression: 9, Records: 3, Plain: 10, Data: gz.Bytes()},
	} {
		e.SubBatch = true
		if recs := subBatchRecords(e); recs != nil {
			t.Errorf("%s: %q", name, recs)
		}
	}
	// a record that claims more than the sub-batch holds ends the list
	short := binary.BigEndian.AppendUint32(nil, 1000)
	if recs := subBatchRecords(streamlog.Entry{SubBatch: true, Records: 1, Data: short}); len(recs) != 0 {
		t.Errorf("short record: %q", recs)
	}
}
