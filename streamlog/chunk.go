// Package streamlog is a stream's log on disk (issue 25): segment files of
// chunks, each segment with an index of its chunks, laid out as RabbitMQ's
// osiris lays them out, so that a chunk goes to a stream-protocol consumer
// as it is stored.
//
// A chunk is one writer batch: a 48-byte header, then an optional Bloom
// filter of the batch's filter values, the data (the entries) and a
// trailer (the publishers' sequence numbers, for deduplication). Its id
// is the offset of its first record; offsets run on across chunks and
// segments. A segment is named by the id of its first chunk
// (%020d.segment, %020d.index); the index holds one 29-byte record per
// chunk (id, timestamp, epoch, position, type).
//
// Memory does not grow with the stream: the log keeps a few numbers per
// segment, readers read chunks from the files, and a seek is a binary
// search of one index file.
package streamlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// Chunk types, as osiris numbers them.
const (
	ChunkUser             uint8 = 0 // messages
	ChunkTrackingDelta    uint8 = 1 // stored consumer offsets
	ChunkTrackingSnapshot uint8 = 2 // the whole tracking state, first in a segment
)

const (
	// HeaderSize is the size of a chunk's header.
	HeaderSize = 48
	// IndexRecordSize is the size of an index record.
	IndexRecordSize = 29
	fileHeaderSize  = 8
	magicVersion    = 0x50 // magic 5, version 0
	// MaxEntries is the most entries one chunk holds.
	MaxEntries = 1<<16 - 1
	// MaxChunkData bounds a chunk's data, Bloom filter and trailer.
	MaxChunkData = 256 << 20
)

var (
	segMagic = []byte("OSIL\x00\x00\x00\x01")
	idxMagic = []byte("OSII\x00\x00\x00\x01")
)

// Header is a chunk's header.
type Header struct {
	Type        uint8
	Entries     uint16
	Records     uint32
	Timestamp   int64 // ms since the epoch, the writer's clock
	Epoch       uint64
	ID          uint64 // offset of the first record
	CRC         uint32 // CRC-32 (IEEE) of the data
	DataSize    uint32
	TrailerSize uint32
	BloomSize   uint8
}

// Size is the chunk's size on disk.
func (h *Header) Size() int64 {
	return HeaderSize + int64(h.BloomSize) + int64(h.DataSize) + int64(h.TrailerSize)
}

// Next is the offset after the chunk's records.
func (h *Header) Next() uint64 { return h.ID + uint64(h.Records) }

// Encode writes the header into b[:HeaderSize].
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	b[0] = magicVersion
	b[1] = h.Type
	binary.BigEndian.PutUint16(b[2:], h.Entries)
	binary.BigEndian.PutUint32(b[4:], h.Records)
	binary.BigEndian.PutUint64(b[8:], uint64(h.Timestamp))
	binary.BigEndian.PutUint64(b[16:], h.Epoch)
	binary.BigEndian.PutUint64(b[24:], h.ID)
	binary.BigEndian.PutUint32(b[32:], h.CRC)
	binary.BigEndian.PutUint32(b[36:], h.DataSize)
	binary.BigEndian.PutUint32(b[40:], h.TrailerSize)
	b[44] = h.BloomSize
	b[45], b[46], b[47] = 0, 0, 0
}

var errBadHeader = errors.New("streamlog: not a chunk header")

// ParseHeader reads a chunk header from b (at least HeaderSize bytes).
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize || b[0] != magicVersion || b[1] > ChunkRaft {
		return Header{}, errBadHeader
	}
	h := Header{
		Type:        b[1],
		Entries:     binary.BigEndian.Uint16(b[2:]),
		Records:     binary.BigEndian.Uint32(b[4:]),
		Timestamp:   int64(binary.BigEndian.Uint64(b[8:])),
		Epoch:       binary.BigEndian.Uint64(b[16:]),
		ID:          binary.BigEndian.Uint64(b[24:]),
		CRC:         binary.BigEndian.Uint32(b[32:]),
		DataSize:    binary.BigEndian.Uint32(b[36:]),
		TrailerSize: binary.BigEndian.Uint32(b[40:]),
		BloomSize:   b[44],
	}
	if h.Entries == 0 || h.Records < uint32(h.Entries) && h.Type == ChunkUser ||
		int64(h.DataSize)+int64(h.TrailerSize) > MaxChunkData {
		return Header{}, errBadHeader
	}
	return h, nil
}

// Chunk is a chunk read from the log. Raw is the chunk as stored (header,
// Bloom filter, data, trailer); Data, Bloom and Trailer are its parts.
type Chunk struct {
	Header
	Raw []byte
}

// Bloom is the chunk's Bloom filter (empty when it has none).
func (c *Chunk) Bloom() []byte { return c.Raw[HeaderSize : HeaderSize+int(c.BloomSize)] }

// Data is the chunk's entries.
func (c *Chunk) Data() []byte {
	o := HeaderSize + int(c.BloomSize)
	return c.Raw[o : o+int(c.DataSize)]
}

// Trailer is the chunk's trailer.
func (c *Chunk) Trailer() []byte {
	o := HeaderSize + int(c.BloomSize) + int(c.DataSize)
	return c.Raw[o : o+int(c.TrailerSize)]
}

// Valid reports whether the data matches the header's CRC.
func (c *Chunk) Valid() bool { return crc32.ChecksumIEEE(c.Data()) == c.CRC }

// AppendEntry appends a simple entry (one record) to data: a 31-bit
// big-endian size, then the bytes, as osiris writes it.
func AppendEntry(data, rec []byte) []byte {
	data = binary.BigEndian.AppendUint32(data, uint32(len(rec))&0x7fffffff)
	return append(data, rec...)
}

// AppendSubBatch appends a sub-batch entry: records records compressed
// with compression (0 none) into data of uncompressed size plain.
func AppendSubBatch(data []byte, compression uint8, records uint16, plain uint32, batch []byte) []byte {
	data = append(data, 0x80|compression<<4)
	data = binary.BigEndian.AppendUint16(data, records)
	data = binary.BigEndian.AppendUint32(data, plain)
	data = binary.BigEndian.AppendUint32(data, uint32(len(batch)))
	return append(data, batch...)
}

// Entry is one entry of a chunk's data.
type Entry struct {
	// SubBatch is set for a sub-batch entry (Compression, Records and
	// Plain describe it); Data is its (compressed) records. For a simple
	// entry Data is the record.
	SubBatch    bool
	Compression uint8
	Records     uint16
	Plain       uint32
	Data        []byte
}

var errBadEntry = errors.New("streamlog: malformed entry")

// NextEntry parses the entry at the start of data and returns it and the
// rest of data.
func NextEntry(data []byte) (Entry, []byte, error) {
	if len(data) < 4 {
		return Entry{}, nil, errBadEntry
	}
	if data[0]&0x80 == 0 {
		n := int(binary.BigEndian.Uint32(data) & 0x7fffffff)
		if len(data)-4 < n {
			return Entry{}, nil, errBadEntry
		}
		return Entry{Records: 1, Plain: uint32(n), Data: data[4 : 4+n]}, data[4+n:], nil
	}
	if len(data) < 11 {
		return Entry{}, nil, errBadEntry
	}
	e := Entry{SubBatch: true, Compression: data[0] >> 4 & 7, Records: binary.BigEndian.Uint16(data[1:]),
		Plain: binary.BigEndian.Uint32(data[3:])}
	n := int(binary.BigEndian.Uint32(data[7:]))
	if len(data)-11 < n {
		return Entry{}, nil, errBadEntry
	}
	e.Data = data[11 : 11+n]
	return e, data[11+n:], nil
}

// index records

type indexRecord struct {
	id        uint64
	timestamp int64
	epoch     uint64
	pos       uint32
	typ       uint8
}

func (r *indexRecord) encode(b []byte) {
	binary.BigEndian.PutUint64(b, r.id)
	binary.BigEndian.PutUint64(b[8:], uint64(r.timestamp))
	binary.BigEndian.PutUint64(b[16:], r.epoch)
	binary.BigEndian.PutUint32(b[24:], r.pos)
	b[28] = r.typ
}

func parseIndexRecord(b []byte) indexRecord {
	return indexRecord{
		id:        binary.BigEndian.Uint64(b),
		timestamp: int64(binary.BigEndian.Uint64(b[8:])),
		epoch:     binary.BigEndian.Uint64(b[16:]),
		pos:       binary.BigEndian.Uint32(b[24:]),
		typ:       b[28],
	}
}
