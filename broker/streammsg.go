package broker

import (
	"strconv"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/amqp10"
)

// A stream keeps its messages as AMQP 1.0 messages (issue 25), so that
// its AMQP 0-9-1 and stream-protocol clients read each other's, as
// RabbitMQ's do. The mapping of a 0-9-1 message is RabbitMQ 3.10.8's
// (checked against it by TestStreamCrossProtocol):
//
//   - message annotations: x-exchange and x-routing-key; x-basic-priority
//     and x-basic-delivery-mode (ubyte) and x-basic-expiration when set;
//   - properties: message-id, user-id (binary), reply-to, correlation-id,
//     content-type and content-encoding (symbols), creation-time;
//   - application properties: the headers, then x-basic-type and
//     x-basic-app-id;
//   - the body as one data section.
//
// Beyond 3.10.8, which drops them, header tables and arrays are kept (as
// AMQP 1.0 maps and lists), so a message read back over 0-9-1 has every
// header it was published with (x-death included); decimals are dropped
// as RabbitMQ drops them. Warren's own dead-letter history goes into the
// message annotation x-opt-deaths (RabbitMQ 4's name for it), from which
// a dead letter read back from a stream is replayed.

// streamEncode appends m as an AMQP 1.0 message. It writes the bytes
// directly (no value boxed), as it runs for every publish to a stream.
func streamEncode(b []byte, m *Message) []byte {
	p := &m.Props
	b = amqp10.AppendDescriptor(b, amqp10.SecMessageAnn)
	b, ann := amqp10.BeginMap(b)
	n := 4
	b = amqp10.AppendString(amqp10.AppendSymbol(b, "x-exchange"), m.Exchange)
	b = amqp10.AppendString(amqp10.AppendSymbol(b, "x-routing-key"), m.RoutingKey)
	if p.Flags&amqp.FlagExpiration != 0 || p.Expiration != "" {
		b = amqp10.AppendString(amqp10.AppendSymbol(b, "x-basic-expiration"), p.Expiration)
		n += 2
	}
	if p.Flags&amqp.FlagPriority != 0 {
		b = append(amqp10.AppendSymbol(b, "x-basic-priority"), 0x50, p.Priority)
		n += 2
	}
	if p.Flags&amqp.FlagDeliveryMode != 0 || p.DeliveryMode != 0 {
		b = append(amqp10.AppendSymbol(b, "x-basic-delivery-mode"), 0x50, p.DeliveryMode)
		n += 2
	}
	if len(m.Deaths) > 0 {
		b = amqp10.Append(amqp10.AppendSymbol(b, "x-opt-deaths"), deathsList(m.Deaths))
		n += 2
	}
	b = amqp10.EndMap(b, ann, n)
	// properties: message-id, user-id, to, subject, reply-to,
	// correlation-id, content-type, content-encoding, absolute-expiry,
	// creation-time (the last set one ends the list)
	has := func(flag uint16, v string) bool { return p.Flags&flag != 0 || v != "" }
	last := -1
	switch {
	case p.Flags&amqp.FlagTimestamp != 0 || !p.Timestamp.IsZero():
		last = 9
	case has(amqp.FlagContentEncoding, p.ContentEncoding):
		last = 7
	case has(amqp.FlagContentType, p.ContentType):
		last = 6
	case has(amqp.FlagCorrelationID, p.CorrelationID):
		last = 5
	case has(amqp.FlagReplyTo, p.ReplyTo):
		last = 4
	case has(amqp.FlagUserID, p.UserID):
		last = 1
	case has(amqp.FlagMessageID, p.MessageID):
		last = 0
	}
	if last >= 0 {
		b = amqp10.AppendDescriptor(b, amqp10.SecProperties)
		var l int
		b, l = amqp10.BeginList(b)
		str := func(b []byte, flag uint16, v string, sym bool) []byte {
			switch {
			case !has(flag, v):
				return append(b, 0x40)
			case sym:
				return amqp10.AppendSymbol(b, v)
			}
			return amqp10.AppendString(b, v)
		}
		for i := 0; i <= last; i++ {
			switch i {
			case 0:
				b = str(b, amqp.FlagMessageID, p.MessageID, false)
			case 1:
				if has(amqp.FlagUserID, p.UserID) {
					b = amqp10.AppendBinary(b, []byte(p.UserID))
				} else {
					b = append(b, 0x40)
				}
			case 4:
				b = str(b, amqp.FlagReplyTo, p.ReplyTo, false)
			case 5:
				b = str(b, amqp.FlagCorrelationID, p.CorrelationID, false)
			case 6:
				b = str(b, amqp.FlagContentType, p.ContentType, true)
			case 7:
				b = str(b, amqp.FlagContentEncoding, p.ContentEncoding, true)
			case 9:
				b = amqp10.Append(b, amqp10.Timestamp(p.Timestamp.Unix()*1000))
			default:
				b = append(b, 0x40)
			}
		}
		b = amqp10.EndList(b, l, last+1)
	}
	typ, app := has(amqp.FlagType, p.Type), has(amqp.FlagAppID, p.AppID)
	if len(p.Headers) > 0 || typ || app {
		b = amqp10.AppendDescriptor(b, amqp10.SecAppProps)
		var start int
		b, start = amqp10.BeginMap(b)
		n := 0
		for k, v := range p.Headers {
			if v, ok := toAMQP10(v, 0); ok {
				b = amqp10.Append(amqp10.AppendString(b, k), v)
				n += 2
			}
		}
		if typ {
			b = amqp10.AppendString(amqp10.AppendString(b, "x-basic-type"), p.Type)
			n += 2
		}
		if app {
			b = amqp10.AppendString(amqp10.AppendString(b, "x-basic-app-id"), p.AppID)
			n += 2
		}
		b = amqp10.EndMap(b, start, n)
	}
	return amqp10.AppendBinary(amqp10.AppendDescriptor(b, amqp10.SecData), m.Body)
}

// toAMQP10 is a header value in AMQP 1.0 (false: dropped).
func toAMQP10(v any, depth int) (any, bool) {
	if depth > amqp.MaxTableDepth {
		return nil, false
	}
	switch v := v.(type) {
	case amqp.RawValue:
		d, ok := v.Decode()
		if !ok {
			return nil, false
		}
		return toAMQP10(d, depth)
	case amqp.Decimal:
		return nil, false
	case amqp.Table:
		m := make(amqp10.Map, 0, len(v))
		for k, e := range v {
			if e, ok := toAMQP10(e, depth+1); ok {
				m = append(m, amqp10.KV{Key: k, Value: e})
			}
		}
		return m, true
	case map[string]any:
		return toAMQP10(amqp.Table(v), depth)
	case []any:
		l := make([]any, 0, len(v))
		for _, e := range v {
			if e, ok := toAMQP10(e, depth+1); ok {
				l = append(l, e)
			}
		}
		return l, true
	case time.Time:
		return amqp10.Timestamp(v.Unix() * 1000), true
	case int:
		return int64(v), true
	}
	return v, true
}

// fromAMQP10 is an AMQP 1.0 value as a 0-9-1 header value (false:
// dropped).
func fromAMQP10(v any) (any, bool) {
	switch v := v.(type) {
	case amqp10.Symbol:
		return string(v), true
	case amqp10.Timestamp:
		return time.Unix(int64(v)/1000, 0), true
	case uint64:
		return int64(v), true // 0-9-1 has no unsigned 64-bit type
	case amqp10.UUID:
		return v[:], true
	case amqp10.Map:
		t := make(amqp.Table, len(v))
		for _, kv := range v {
			k, ok := mapKey(kv.Key)
			if !ok {
				continue
			}
			if e, ok := fromAMQP10(kv.Value); ok {
				t[k] = e
			}
		}
		return t, true
	case []any:
		l := make([]any, 0, len(v))
		for _, e := range v {
			if e, ok := fromAMQP10(e); ok {
				l = append(l, e)
			}
		}
		return l, true
	case amqp10.Described:
		return nil, false
	}
	return v, true
}

func mapKey(k any) (string, bool) {
	switch k := k.(type) {
	case string:
		return k, true
	case amqp10.Symbol:
		return string(k), true
	}
	return "", false
}

// deathsList is a dead-letter history as x-opt-deaths: a list of maps.
func deathsList(ds []Death) []any {
	l := make([]any, 0, len(ds))
	for _, d := range ds {
		keys := make([]any, len(d.RoutingKeys))
		for i, k := range d.RoutingKeys {
			keys[i] = k
		}
		m := amqp10.Map{
			{Key: amqp10.Symbol("queue"), Value: d.Queue},
			{Key: amqp10.Symbol("reason"), Value: amqp10.Symbol(d.Reason)},
			{Key: amqp10.Symbol("count"), Value: uint64(d.Count)},
			{Key: amqp10.Symbol("first-time"), Value: amqp10.Timestamp(d.Time.UnixMilli())},
			{Key: amqp10.Symbol("exchange"), Value: d.Exchange},
			{Key: amqp10.Symbol("routing-keys"), Value: keys},
		}
		if d.HasExpiration {
			m = append(m, amqp10.KV{Key: amqp10.Symbol("original-expiration"), Value: d.OriginalExpiration})
		}
		l = append(l, m)
	}
	return l
}

func deathsFromList(v any) []Death {
	l, _ := v.([]any)
	var out []Death
	for _, e := range l {
		m, ok := e.(amqp10.Map)
		if !ok {
			continue
		}
		var d Death
		if s, ok := m.Get("queue"); ok {
			d.Queue, _ = s.(string)
		}
		if s, ok := m.Get("reason"); ok {
			r, _ := s.(amqp10.Symbol)
			d.Reason = string(r)
		}
		if c, ok := m.Get("count"); ok {
			n, _ := c.(uint64)
			d.Count = int64(n)
		}
		if t, ok := m.Get("first-time"); ok {
			ts, _ := t.(amqp10.Timestamp)
			d.Time = time.UnixMilli(int64(ts)).UTC()
		}
		if x, ok := m.Get("exchange"); ok {
			d.Exchange, _ = x.(string)
		}
		if ks, ok := m.Get("routing-keys"); ok {
			kl, _ := ks.([]any)
			for _, k := range kl {
				if s, ok := k.(string); ok {
					d.RoutingKeys = append(d.RoutingKeys, s)
				}
			}
		}
		if x, ok := m.Get("original-expiration"); ok {
			d.OriginalExpiration, _ = x.(string)
			d.HasExpiration = true
		}
		out = append(out, d)
	}
	return out
}

// streamDecode reads an AMQP 1.0 message of stream stream as a 0-9-1
// message. A message without x-exchange and x-routing-key (published over
// the stream protocol) reads as published to the default exchange with
// the stream's name, as RabbitMQ delivers it.
func streamDecode(rec []byte, stream string) (*Message, error) {
	m := &Message{RoutingKey: stream}
	p := &m.Props
	var body []byte
	bodies := 0
	for len(rec) > 0 {
		v, rest, err := amqp10.Decode(rec)
		if err != nil {
			return nil, err
		}
		rec = rest
		d, ok := v.(amqp10.Described)
		if !ok {
			return nil, amqp10.ErrMalformed
		}
		code, _ := d.Descriptor.(uint64)
		switch code {
		case amqp10.SecHeader:
			l, _ := d.Value.([]any)
			if len(l) > 0 && l[0] == true && p.Flags&amqp.FlagDeliveryMode == 0 {
				p.DeliveryMode, p.Flags = 2, p.Flags|amqp.FlagDeliveryMode
			}
			if len(l) > 1 {
				if pr, ok := l[1].(uint8); ok && p.Flags&amqp.FlagPriority == 0 {
					p.Priority, p.Flags = pr, p.Flags|amqp.FlagPriority
				}
			}
		case amqp10.SecMessageAnn:
			m2, _ := d.Value.(amqp10.Map)
			for _, kv := range m2 {
				k, _ := mapKey(kv.Key)
				switch k {
				case "x-exchange":
					m.Exchange, _ = kv.Value.(string)
				case "x-routing-key":
					if s, ok := kv.Value.(string); ok {
						m.RoutingKey = s
					}
				case "x-basic-expiration":
					p.Expiration, _ = kv.Value.(string)
					p.Flags |= amqp.FlagExpiration
				case "x-basic-priority":
					if v, ok := kv.Value.(uint8); ok {
						p.Priority, p.Flags = v, p.Flags|amqp.FlagPriority
					}
				case "x-basic-delivery-mode":
					if v, ok := kv.Value.(uint8); ok {
						p.DeliveryMode, p.Flags = v, p.Flags|amqp.FlagDeliveryMode
					}
				case "x-opt-deaths":
					m.Deaths = deathsFromList(kv.Value)
				}
			}
		case amqp10.SecProperties:
			l, _ := d.Value.([]any)
			get := func(i int) any {
				if i < len(l) {
					return l[i]
				}
				return nil
			}
			strOf := func(v any) (string, bool) {
				switch v := v.(type) {
				case string:
					return v, true
				case amqp10.Symbol:
					return string(v), true
				case []byte:
					return string(v), true
				case uint64:
					return strconv.FormatUint(v, 10), true
				case amqp10.UUID:
					return uuidString(v), true
				}
				return "", false
			}
			setStr := func(i int, dst *string, flag uint16) {
				if s, ok := strOf(get(i)); ok {
					*dst, p.Flags = s, p.Flags|flag
				}
			}
			setStr(0, &p.MessageID, amqp.FlagMessageID)
			setStr(1, &p.UserID, amqp.FlagUserID)
			setStr(4, &p.ReplyTo, amqp.FlagReplyTo)
			setStr(5, &p.CorrelationID, amqp.FlagCorrelationID)
			setStr(6, &p.ContentType, amqp.FlagContentType)
			setStr(7, &p.ContentEncoding, amqp.FlagContentEncoding)
			if ts, ok := get(9).(amqp10.Timestamp); ok {
				p.Timestamp, p.Flags = time.Unix(int64(ts)/1000, 0), p.Flags|amqp.FlagTimestamp
			}
		case amqp10.SecAppProps:
			m2, _ := d.Value.(amqp10.Map)
			for _, kv := range m2 {
				k, ok := mapKey(kv.Key)
				if !ok {
					continue
				}
				switch k {
				case "x-basic-type":
					p.Type, _ = kv.Value.(string)
					p.Flags |= amqp.FlagType
					continue
				case "x-basic-app-id":
					p.AppID, _ = kv.Value.(string)
					p.Flags |= amqp.FlagAppID
					continue
				}
				if v, ok := fromAMQP10(kv.Value); ok {
					if p.Headers == nil {
						p.Headers = amqp.Table{}
						p.Flags |= amqp.FlagHeaders
					}
					p.Headers[k] = v
				}
			}
		case amqp10.SecData:
			bs, _ := d.Value.([]byte)
			if bodies == 0 {
				body = bs
			} else {
				body = append(body, bs...)
			}
			bodies++
		case amqp10.SecAMQPValue:
			switch v := d.Value.(type) {
			case []byte:
				body = v
			case string:
				body = []byte(v)
			}
		}
	}
	if body == nil {
		body = []byte{}
	}
	m.Body = body
	return m, nil
}

func uuidString(u amqp10.UUID) string {
	const hex = "0123456789abcdef"
	var b []byte
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&15])
	}
	return string(b)
}
