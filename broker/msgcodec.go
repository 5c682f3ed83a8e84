package broker

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/wire"
)

// Record types of a queue's message log (msgstore.go).
const (
	recMessage  byte = 'M' // a message enqueued: msgHeader + message
	recMovedIn  byte = 'D' // a dead letter moved in: srcID, srcSeq, then as recMessage
	recAck      byte = 'A' // messages removed: seqs
	recRequeue  byte = 'R' // a message returned: seq, newSeq, counts
	recMovedOut byte = 'X' // intent: seq is being dead-lettered to target queues
	recPurge    byte = 'P' // a purge: every seq up to N except those listed
	// recMovedRemote: a dead letter owed to queues on other nodes: rseq,
	// target names, the copy (dlremote.go).
	recMovedRemote byte = 'Y'
)

// msgHeader is what a queue keeps of a message besides the message: the
// fixed-size front of an M record.
type msgHeader struct {
	seq           uint64
	expiresAt     int64
	deliveryCount uint32
	acquired      uint32
	redelivered   bool
	persistent    bool   // set by appendMsg
	bodyLen       uint32 // set by appendMsg
}

const msgHeaderSize = 8 + 8 + 4 + 4 + 1 + 4

func appendMsgHeader(b []byte, h msgHeader) []byte {
	b = binary.LittleEndian.AppendUint64(b, h.seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.expiresAt))
	b = binary.LittleEndian.AppendUint32(b, h.deliveryCount)
	b = binary.LittleEndian.AppendUint32(b, h.acquired)
	var flags byte
	if h.redelivered {
		flags |= 1
	}
	if h.persistent {
		flags |= 2
	}
	b = append(b, flags)
	return binary.LittleEndian.AppendUint32(b, h.bodyLen)
}

var errBadRecord = errors.New("broker: malformed message record")

// msgRecord decodes the header of an M or D record (a D record's source
// prefix skipped); ok is false for other records and malformed ones.
func msgRecord(typ byte, pl []byte) (h msgHeader, rest []byte, ok bool) {
	switch typ {
	case recMovedIn:
		if len(pl) < 16 {
			return h, nil, false
		}
		pl = pl[16:]
	case recMessage:
	default:
		return h, nil, false
	}
	h, rest, err := decodeMsgHeader(pl)
	return h, rest, err == nil
}

func decodeMsgHeader(b []byte) (msgHeader, []byte, error) {
	if len(b) < msgHeaderSize {
		return msgHeader{}, nil, errBadRecord
	}
	h := msgHeader{
		seq:           binary.LittleEndian.Uint64(b),
		expiresAt:     int64(binary.LittleEndian.Uint64(b[8:])),
		deliveryCount: binary.LittleEndian.Uint32(b[16:]),
		acquired:      binary.LittleEndian.Uint32(b[20:]),
		redelivered:   b[24]&1 != 0,
		persistent:    b[24]&2 != 0,
		bodyLen:       binary.LittleEndian.Uint32(b[25:]),
	}
	return h, b[msgHeaderSize:], nil
}

// appendMessage encodes m: the routing information, the broker's own
// dead-letter history, the properties as on the wire, then the body.
func appendMessage(b []byte, m *Message) []byte {
	b = appendStr(b, m.Exchange)
	b = appendStr(b, m.RoutingKey)
	b = binary.AppendUvarint(b, uint64(len(m.BCC)))
	for _, k := range m.BCC {
		b = appendStr(b, k)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Deaths)))
	for _, d := range m.Deaths {
		b = appendStr(b, d.Queue)
		b = appendStr(b, d.Reason)
		b = binary.AppendVarint(b, d.Count)
		b = binary.AppendVarint(b, d.Time.UnixMilli())
		b = appendStr(b, d.Exchange)
		b = binary.AppendUvarint(b, uint64(len(d.RoutingKeys)))
		for _, k := range d.RoutingKeys {
			b = appendStr(b, k)
		}
		b = appendStr(b, d.OriginalExpiration)
		b = appendBool(b, d.HasExpiration)
	}
	b = appendBool(b, m.HasTTL)
	b = binary.AppendVarint(b, m.TTL)
	n := len(b)
	b = append(b, 0, 0, 0, 0)
	b = amqp.AppendProperties(b, &m.Props)
	binary.LittleEndian.PutUint32(b[n:], uint32(len(b)-n-4))
	return append(b, m.Body...)
}

func appendStr(b []byte, s string) []byte { return wire.AppendStr(b, s) }

func appendBool(b []byte, v bool) []byte { return wire.AppendBool(b, v) }

// msgDecoder reads what appendMessage and the link encodings wrote; the
// first error (errBadRecord) sticks.
type msgDecoder = wire.Reader

func newDecoder(b []byte) *msgDecoder {
	d := wire.NewReader(b, errBadRecord)
	return &d
}

// messageDecodes counts decodeMessage calls, for the tests that show a
// path decodes once (TestQuorumPublishEncodedOnce).
var messageDecodes atomic.Uint64

// decodeMessage decodes what appendMessage wrote. The message owns its
// memory (nothing aliases b).
func decodeMessage(b []byte) (*Message, error) {
	messageDecodes.Add(1)
	d := newDecoder(b)
	m := &Message{Exchange: d.Str(), RoutingKey: d.Str()}
	if n := d.Count(); n > 0 {
		m.BCC = make([]string, n)
		for i := range m.BCC {
			m.BCC[i] = d.Str()
		}
	}
	if n := d.Count(); n > 0 {
		m.Deaths = make([]Death, n)
		for i := range m.Deaths {
			x := &m.Deaths[i]
			x.Queue, x.Reason, x.Count = d.Str(), d.Str(), d.Varint()
			x.Time = time.UnixMilli(d.Varint())
			x.Exchange = d.Str()
			if k := d.Count(); k > 0 {
				x.RoutingKeys = make([]string, k)
				for j := range x.RoutingKeys {
					x.RoutingKeys[j] = d.Str()
				}
			}
			x.OriginalExpiration, x.HasExpiration = d.Str(), d.Bool()
		}
	}
	m.HasTTL = d.Bool()
	m.TTL = d.Varint()
	var props []byte
	if pn := d.Next(4); pn != nil {
		props = d.Next(uint64(binary.LittleEndian.Uint32(pn)))
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	if err := amqp.DecodeProperties(props, &m.Props); err != nil {
		return nil, err
	}
	m.Body = append([]byte(nil), d.Rest()...)
	return m, nil
}

// persistent reports whether m asks to survive a restart (delivery-mode 2).
func (m *Message) persistent() bool { return m.Props.DeliveryMode == 2 }

// ownTTL is m's own TTL in ms (the expiration property), -1 for none.
func (m *Message) ownTTL() int64 {
	if m.HasTTL {
		return m.TTL
	}
	return -1
}
