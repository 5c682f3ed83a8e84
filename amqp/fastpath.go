package amqp

import "encoding/binary"

// Hot-path helpers: the same wire format as the generated code, without
// boxing methods in interfaces or allocating strings that did not change.

// DecodeReuse decodes basic.publish arguments into m like Decode, but keeps
// m's Exchange and RoutingKey strings when their bytes are unchanged (a
// publisher usually repeats them), so that a stream of publishes decodes
// without allocating.
func (m *BasicPublish) DecodeReuse(args []byte) error {
	d := decoder{b: args}
	d.short()
	if b := d.shortstrBytes(); string(b) != m.Exchange {
		m.Exchange = string(b)
	}
	if b := d.shortstrBytes(); string(b) != m.RoutingKey {
		m.RoutingKey = string(b)
	}
	bits := d.octet()
	m.Mandatory = bits&1 != 0
	m.Immediate = bits&2 != 0
	return d.finish(60, 40, args)
}

// AppendShortstrKey appends a field-table key (a shortstr).
func AppendShortstrKey(dst []byte, k string) []byte { return appendShortstr(dst, k) }

// AppendStringValue appends a longstr field value ('S').
func AppendStringValue(dst []byte, s string) []byte { return appendLongstr(append(dst, 'S'), s) }

// IsBasicPublish reports whether a method frame payload is basic.publish,
// returning its arguments.
func IsBasicPublish(payload []byte) ([]byte, bool) {
	if len(payload) < 4 || payload[0] != 0 || payload[1] != 60 || payload[2] != 0 || payload[3] != 40 {
		return nil, false
	}
	return payload[4:], true
}

// AppendDeliverFrame appends a basic.deliver method frame, as
// AppendMethodFrame with a *BasicDeliver would, without allocating.
func AppendDeliverFrame(dst []byte, channel uint16, consumerTag string, deliveryTag uint64, redelivered bool, exchange, routingKey string) []byte {
	start := len(dst)
	dst = append(dst, FrameMethod, byte(channel>>8), byte(channel), 0, 0, 0, 0)
	dst = append(dst, 0, 60, 0, 60)
	dst = appendShortstr(dst, consumerTag)
	dst = appendLonglong(dst, deliveryTag)
	if redelivered {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	dst = appendShortstr(dst, exchange)
	dst = appendShortstr(dst, routingKey)
	binary.BigEndian.PutUint32(dst[start+3:], uint32(len(dst)-start-7))
	return append(dst, FrameEnd)
}
