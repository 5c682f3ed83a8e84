package mgmt

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

// Messages as RabbitMQ's HTTP API shows and takes them.

// stringProps are the string properties, by their name in the API.
var stringProps = []struct {
	name  string
	field func(*amqp.Properties) *string
	flag  uint16
}{
	{"content_type", func(p *amqp.Properties) *string { return &p.ContentType }, amqp.FlagContentType},
	{"content_encoding", func(p *amqp.Properties) *string { return &p.ContentEncoding }, amqp.FlagContentEncoding},
	{"correlation_id", func(p *amqp.Properties) *string { return &p.CorrelationID }, amqp.FlagCorrelationID},
	{"reply_to", func(p *amqp.Properties) *string { return &p.ReplyTo }, amqp.FlagReplyTo},
	{"expiration", func(p *amqp.Properties) *string { return &p.Expiration }, amqp.FlagExpiration},
	{"message_id", func(p *amqp.Properties) *string { return &p.MessageID }, amqp.FlagMessageID},
	{"type", func(p *amqp.Properties) *string { return &p.Type }, amqp.FlagType},
	{"user_id", func(p *amqp.Properties) *string { return &p.UserID }, amqp.FlagUserID},
	{"app_id", func(p *amqp.Properties) *string { return &p.AppID }, amqp.FlagAppID},
	{"cluster_id", func(p *amqp.Properties) *string { return &p.ClusterID }, amqp.FlagClusterID},
}

// propsJSON renders properties as RabbitMQ's "properties" object: only
// the properties that are set.
func propsJSON(p *amqp.Properties) map[string]any {
	m := map[string]any{}
	for _, sp := range stringProps {
		if v := *sp.field(p); v != "" || p.Flags&sp.flag != 0 {
			m[sp.name] = v
		}
	}
	if len(p.Headers) > 0 || p.Flags&amqp.FlagHeaders != 0 {
		m["headers"] = broker.TableJSON(p.Headers)
	}
	if p.DeliveryMode != 0 || p.Flags&amqp.FlagDeliveryMode != 0 {
		m["delivery_mode"] = p.DeliveryMode
	}
	if p.Priority != 0 || p.Flags&amqp.FlagPriority != 0 {
		m["priority"] = p.Priority
	}
	if !p.Timestamp.IsZero() || p.Flags&amqp.FlagTimestamp != 0 {
		m["timestamp"] = p.Timestamp.Unix()
	}
	return m
}

// propsFromJSON parses a publish request's "properties".
func propsFromJSON(m map[string]any) (amqp.Properties, error) {
	var p amqp.Properties
next:
	for k, v := range m {
		bad := func() (amqp.Properties, error) {
			return p, badRequest(fmt.Sprintf("invalid property '%s'", k))
		}
		for _, sp := range stringProps {
			if sp.name == k {
				s, ok := v.(string)
				if !ok {
					return bad()
				}
				*sp.field(&p) = s
				continue next
			}
		}
		switch k {
		case "delivery_mode", "priority":
			n, ok := jsonInt(v)
			if !ok || n < 0 || n > 255 {
				return bad()
			}
			if k == "delivery_mode" {
				p.DeliveryMode = uint8(n)
			} else {
				p.Priority = uint8(n)
			}
		case "timestamp":
			n, ok := jsonInt(v)
			if !ok {
				return bad()
			}
			p.Timestamp = time.Unix(n, 0)
		case "headers":
			h, ok := v.(map[string]any)
			if !ok {
				return bad()
			}
			t, err := broker.JSONTable(h)
			if err != nil {
				return p, badRequest(err.Error())
			}
			p.Headers = t
		default:
			return bad()
		}
	}
	return p, nil
}

// jsonInt reads an integer from a JSON number (json.Number with UseNumber)
// or a string of digits, as RabbitMQ accepts both.
func jsonInt(v any) (int64, bool) {
	if s, ok := v.(string); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	return broker.JSONInt(v)
}

// payloadJSON encodes a body as RabbitMQ's get does: "string" when it is
// valid UTF-8 and encoding is auto, else base64. truncate (>0) cuts it.
func payloadJSON(body []byte, encoding string, truncate int) (string, string) {
	if truncate > 0 && len(body) > truncate {
		body = body[:truncate]
	}
	if encoding != "base64" && utf8.Valid(body) {
		return string(body), "string"
	}
	return base64.StdEncoding.EncodeToString(body), "base64"
}

// deathJSON renders one x-death entry as RabbitMQ writes it.
func deathJSON(d broker.Death) api.Death {
	keys := d.RoutingKeys
	if keys == nil {
		keys = []string{}
	}
	m := api.Death{Count: d.Count, Reason: d.Reason, Queue: d.Queue, Time: d.Time.Unix(),
		Exchange: d.Exchange, RoutingKeys: keys}
	if d.HasExpiration {
		m.OriginalExpiration = &d.OriginalExpiration
	}
	return m
}
