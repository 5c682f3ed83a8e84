package bridge

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
)

// ShovelComponent is the runtime parameter component of dynamic shovels.
const ShovelComponent = "shovel"

// staticComponent marks a static shovel's (the configuration's) in the
// manager, where a dynamic one of the same name loses to it.
const staticComponent = "static-shovel"

// DeleteAfter is a shovel's src-delete-after.
type DeleteAfter struct {
	// QueueLength: as many messages as the source queue holds when the
	// shovel starts. Else N messages, N < 0 for never.
	QueueLength bool
	N           int64
}

// Never reports whether the shovel runs until it is deleted.
func (d DeleteAfter) Never() bool { return !d.QueueLength && d.N < 0 }

// Ack modes.
const (
	OnConfirm = "on-confirm"
	OnPublish = "on-publish"
	NoAck     = "no-ack"
)

// ShovelDef is a dynamic shovel as RabbitMQ's shovel plugin defines it
// (PUT /api/parameters/shovel/{vhost}/{name}), read by ParseShovel.
type ShovelDef struct {
	VHost, Name string
	Value       map[string]any // the parameter as given

	SrcURIs, DestURIs []string // tried in turn from a random start
	SrcQueue          string   // or SrcExchange (with SrcExchangeKey)
	SrcQueueArgs      amqp.Table
	SrcExchange       string
	SrcExchangeKey    string
	SrcPrefetch       int
	SrcConsumerArgs   amqp.Table
	SrcDeleteAfter    DeleteAfter
	SrcPredeclared    bool // do not declare the source queue (4.0)

	DestQueue       string // or DestExchange; neither: the message's own
	DestQueueArgs   amqp.Table
	DestExchange    *string
	DestExchangeKey *string
	DestPredeclared bool

	AckMode         string
	ReconnectDelay  time.Duration // 0: a failed shovel is not restarted
	ForwardHeaders  bool          // x-shovelled
	TimestampHeader bool          // x-shovelled-timestamp
	PublishProps    map[string]any
}

// ValidationError is a definition ParseShovel (or ParseUpstream) refuses:
// the management API answers 400 "Validation failed", Msg after it.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// erl renders a JSON value as RabbitMQ's validation messages show it (an
// Erlang term: strings are binaries).
func erl(v any) string {
	switch x := v.(type) {
	case string:
		return "<<" + strconv.Quote(x) + ">>"
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return "null"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = erl(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = "{" + erl(k) + "," + erl(x[k]) + "}"
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprint(v)
}

// shovelKeys are the keys a shovel's value may have: RabbitMQ 3.10's and
// the legacy names it still takes, with 4.0's predeclared flags.
var shovelKeys = map[string]bool{
	"src-uri": true, "src-queue": true, "src-queue-args": true, "src-exchange": true, "src-exchange-key": true,
	"src-prefetch-count": true, "prefetch-count": true, "src-delete-after": true, "delete-after": true,
	"src-consumer-args": true, "src-protocol": true, "src-predeclared": true,
	"dest-uri": true, "dest-queue": true, "dest-queue-args": true, "dest-exchange": true, "dest-exchange-key": true,
	"dest-protocol": true, "dest-predeclared": true,
	"ack-mode": true, "reconnect-delay": true,
	"add-forward-headers": true, "dest-add-forward-headers": true,
	"add-timestamp-header": true, "dest-add-timestamp-header": true,
	"publish-properties": true, "dest-publish-properties": true,
}

// ParseShovel reads a dynamic shovel's value; its errors are
// *ValidationError, worded as RabbitMQ's.
func ParseShovel(vhost, name string, value map[string]any) (*ShovelDef, error) {
	var unknown []string
	for k := range value {
		if !shovelKeys[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		terms := make([]string, len(unknown))
		for i, k := range unknown {
			terms[i] = "{" + erl(k) + "," + erl(value[k]) + "}"
		}
		return nil, invalid("Unrecognised terms [%s] in %s", strings.Join(terms, ","), name)
	}
	d := &ShovelDef{VHost: vhost, Name: name, Value: value, SrcPrefetch: 1000, AckMode: OnConfirm,
		ReconnectDelay: 5 * time.Second, SrcDeleteAfter: DeleteAfter{N: -1}}
	var err error
	for _, k := range []string{"src-uri", "dest-uri"} {
		if _, ok := value[k]; !ok {
			return nil, invalid("Key %q not found in %s", k, name)
		}
	}
	if d.SrcURIs, err = uriList(value["src-uri"]); err != nil {
		return nil, err
	}
	if d.DestURIs, err = uriList(value["dest-uri"]); err != nil {
		return nil, err
	}
	for _, k := range []string{"src-protocol", "dest-protocol"} {
		if p, ok := value[k]; ok && p != "amqp091" {
			if p == "amqp10" {
				return nil, invalid("%s: AMQP 1.0 shovels are not supported; use amqp091", k)
			}
			return nil, invalid("%s should be one of [<<\"amqp091\">>,<<\"amqp10\">>], actually was %s", k, erl(p))
		}
	}
	str := func(k string) (string, bool, error) {
		v, ok := value[k]
		if !ok {
			return "", false, nil
		}
		s, isStr := v.(string)
		if !isStr {
			return "", false, invalid("%s should be binary, actually was %s", k, erl(v))
		}
		return s, true, nil
	}
	_, hasSrcQ := value["src-queue"]
	_, hasSrcX := value["src-exchange"]
	switch {
	case hasSrcQ && hasSrcX:
		return nil, invalid("Cannot specify 'src-exchange' and 'src-queue'")
	case !hasSrcQ && !hasSrcX:
		return nil, invalid("Must specify 'src-exchange' or 'src-queue'")
	case hasSrcQ:
		if d.SrcQueue, _, err = str("src-queue"); err != nil {
			return nil, err
		}
	default:
		if d.SrcExchange, _, err = str("src-exchange"); err != nil {
			return nil, err
		}
		if d.SrcExchangeKey, _, err = str("src-exchange-key"); err != nil {
			return nil, err
		}
	}
	_, hasDestQ := value["dest-queue"]
	_, hasDestX := value["dest-exchange"]
	switch {
	case hasDestQ && hasDestX:
		return nil, invalid("Cannot specify 'dest-exchange' and 'dest-queue'")
	case hasDestQ:
		if d.DestQueue, _, err = str("dest-queue"); err != nil {
			return nil, err
		}
	case hasDestX:
		x, _, err := str("dest-exchange")
		if err != nil {
			return nil, err
		}
		d.DestExchange = &x
	}
	if !hasDestQ {
		if k, ok, err := str("dest-exchange-key"); err != nil {
			return nil, err
		} else if ok {
			d.DestExchangeKey = &k
		}
	}
	table := func(k string) (amqp.Table, error) {
		v, ok := value[k]
		if !ok {
			return nil, nil
		}
		m, isMap := v.(map[string]any)
		if !isMap {
			return nil, invalid("%s should be a table, actually was %s", k, erl(v))
		}
		return jsonTable(m), nil
	}
	if d.SrcQueueArgs, err = table("src-queue-args"); err != nil {
		return nil, err
	}
	if d.DestQueueArgs, err = table("dest-queue-args"); err != nil {
		return nil, err
	}
	if d.SrcConsumerArgs, err = table("src-consumer-args"); err != nil {
		return nil, err
	}
	if k, v, ok := either(value, "src-prefetch-count", "prefetch-count"); ok {
		n, isInt := broker.JSONInt(v)
		if !isInt {
			return nil, invalid("%s should be a number, actually was %s", k, erl(v))
		}
		if n < 0 || n > 65535 {
			return nil, invalid("%s should be a number between 0 and 65535, actually was %s", k, erl(v))
		}
		d.SrcPrefetch = int(n)
	}
	if k, v, ok := either(value, "src-delete-after", "delete-after"); ok {
		bad := invalid("%s should be a number greater than or equal to 0, \"never\" or \"queue-length\", actually was %s", k, erl(v))
		switch x := v.(type) {
		case string:
			switch x {
			case "never":
			case "queue-length":
				d.SrcDeleteAfter = DeleteAfter{QueueLength: true}
			default:
				return nil, bad
			}
		default:
			n, isInt := broker.JSONInt(v)
			if !isInt || n < 0 {
				return nil, bad
			}
			d.SrcDeleteAfter = DeleteAfter{N: n}
		}
	}
	if v, ok := value["ack-mode"]; ok {
		s, _ := v.(string)
		switch s {
		case OnConfirm, OnPublish, NoAck:
			d.AckMode = s
		default:
			return nil, invalid("ack-mode should be one of [<<\"no-ack\">>,<<\"on-publish\">>,<<\"on-confirm\">>], actually was %s", erl(v))
		}
	}
	if d.AckMode == NoAck && !d.SrcDeleteAfter.QueueLength && d.SrcDeleteAfter.N >= 0 {
		return nil, invalid("Cannot specify 'no-ack' and numerical 'delete-after'")
	}
	if v, ok := value["reconnect-delay"]; ok {
		// RabbitMQ takes any number; not a positive one means no restart.
		n, isNum := v.(json.Number)
		f, err := n.Float64()
		if !isNum {
			if x, isF := v.(float64); isF {
				f, err = x, nil
			} else {
				return nil, invalid("reconnect-delay should be a number, actually was %s", erl(v))
			}
		}
		if err != nil {
			return nil, invalid("reconnect-delay should be a number, actually was %s", erl(v))
		}
		d.ReconnectDelay = 0
		if f > 0 {
			d.ReconnectDelay = time.Duration(f * float64(time.Second))
		}
	}
	for _, b := range []struct {
		keys [2]string
		to   *bool
	}{{[2]string{"dest-add-forward-headers", "add-forward-headers"}, &d.ForwardHeaders},
		{[2]string{"dest-add-timestamp-header", "add-timestamp-header"}, &d.TimestampHeader},
		{[2]string{"src-predeclared"}, &d.SrcPredeclared}, {[2]string{"dest-predeclared"}, &d.DestPredeclared}} {
		k, v, ok := either(value, b.keys[0], b.keys[1])
		if !ok {
			continue
		}
		x, isBool := v.(bool)
		if !isBool {
			return nil, invalid("%s should be boolean, actually was %s", k, erl(v))
		}
		*b.to = x
	}
	if k, v, ok := either(value, "dest-publish-properties", "publish-properties"); ok {
		m, isMap := v.(map[string]any)
		if !isMap {
			return nil, invalid("%s not a list %s", k, erl(v))
		}
		for pk := range m {
			if !publishPropKeys[pk] {
				return nil, invalid("%s: unknown property %s", k, erl(pk))
			}
		}
		d.PublishProps = m
	}
	return d, nil
}

// either returns the first of keys present in value ("" keys skipped).
func either(value map[string]any, keys ...string) (string, any, bool) {
	for _, k := range keys {
		if k == "" {
			continue
		}
		if v, ok := value[k]; ok {
			return k, v, true
		}
	}
	return "", nil, false
}

// uriList reads a string or a list of strings, each a valid URI.
func uriList(v any) ([]string, error) {
	var list []string
	switch x := v.(type) {
	case string:
		list = []string{x}
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, invalid("%s not a valid URI", erl(e))
			}
			list = append(list, s)
		}
	default:
		return nil, invalid("%s not a valid URI", erl(v))
	}
	for _, s := range list {
		if _, err := ParseURI(s); err != nil {
			return nil, invalid("%s not a valid URI: %v", erl(Redact(s)), err)
		}
	}
	return list, nil
}

// publishPropKeys are the basic properties dest-publish-properties sets.
var publishPropKeys = map[string]bool{
	"content_type": true, "content_encoding": true, "headers": true, "delivery_mode": true, "priority": true,
	"correlation_id": true, "reply_to": true, "expiration": true, "message_id": true, "timestamp": true,
	"type": true, "user_id": true, "app_id": true, "cluster_id": true,
}

// jsonTable turns JSON arguments into an AMQP table: integral numbers
// become longs, as RabbitMQ's JSON decoding makes them.
func jsonTable(m map[string]any) amqp.Table {
	t := amqp.Table{}
	for k, v := range m {
		t[k] = jsonValue(v)
	}
	return t
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case float64:
		if n, ok := broker.JSONInt(x); ok {
			return n
		}
		return x
	case map[string]any:
		return jsonTable(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	}
	return v
}
