package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
)

type options struct {
	URI           string
	Publishers    int
	Consumers     int
	Size          int
	Persistent    bool
	Confirm       int
	AutoAck       bool
	MultiAckEvery int
	Prefetch      int
	Rate          float64
	Queue         string
	QueueArgsRaw  string
	QueueArgs     amqp.Table
	// ConsumerArgs are basic.consume's arguments (x-stream-offset...).
	ConsumerArgsRaw string
	ConsumerArgs    amqp.Table
	DurableQueue    bool
	Exchange        string
	ExchangeType    string
	RoutingKey      string
	Fanout          int
	Nack            bool
	DLXQueue        string
	Expiration      string
	Duration        time.Duration
	Count           int64
	Warmup          time.Duration
	PID             int
	Progress        time.Duration
	JSON            bool
	Drain           time.Duration
	DrainMax        time.Duration
	Cleanup         bool
	Predeclared     bool
	Heartbeat       time.Duration
	FlushBytes      int
	PaceQuantum     time.Duration
	CPUProfile      string
}

func newFlagSet(o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("warren-perf", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.URI, "uri", "amqp://guest:guest@127.0.0.1:5672/", "broker `URI`")
	fs.IntVar(&o.Publishers, "publishers", 1, "publisher connections (one channel each)")
	fs.IntVar(&o.Consumers, "consumers", 1, "consumer connections (one channel and consumer each), spread over the queues")
	fs.IntVar(&o.Size, "size", 16, "message body `bytes` (>= 16: send time and sequence number)")
	fs.BoolVar(&o.Persistent, "persistent", false, "publish persistent messages (delivery-mode 2)")
	fs.IntVar(&o.Confirm, "confirm", 0, "publisher confirms with at most `N` unconfirmed messages per publisher (0: no confirms)")
	fs.BoolVar(&o.AutoAck, "auto-ack", false, "consume with no-ack")
	fs.IntVar(&o.MultiAckEvery, "multi-ack-every", 1, "ack every `N`th delivery with multiple=true (1: ack each delivery singly)")
	fs.IntVar(&o.Prefetch, "prefetch", 0, "basic.qos prefetch count per consumer (0: unlimited)")
	fs.Float64Var(&o.Rate, "rate", 0, "messages/s per publisher (0: as fast as possible)")
	fs.StringVar(&o.Queue, "queue", "", "queue `name` (with --fanout, the prefix of the queue names); default: warren-perf-<random>")
	fs.StringVar(&o.ConsumerArgsRaw, "consumer-args", "", "basic.consume arguments, as --queue-args: 'x-stream-offset=first' to read a stream from its start")
	fs.StringVar(&o.QueueArgsRaw, "queue-args", "", "queue arguments: 'x-max-length=10,x-queue-type=quorum' (numbers are longs, true/false bools) or a JSON object")
	fs.BoolVar(&o.DurableQueue, "durable-queue", false, "declare durable queues and exchanges (implied by x-queue-type quorum or stream)")
	fs.StringVar(&o.Exchange, "exchange", "", "exchange to publish to (declared with --exchange-type, the queue bound to it); default: the default exchange")
	fs.StringVar(&o.ExchangeType, "exchange-type", "direct", "type of --exchange")
	fs.StringVar(&o.RoutingKey, "routing-key", "", "routing key for --exchange (default: the queue name)")
	fs.IntVar(&o.Fanout, "fanout", 0, "declare `N` queues bound to one fanout exchange and publish to it; consumers spread over the queues")
	fs.BoolVar(&o.Nack, "nack", false, "consumers nack (requeue=false) instead of acking: with --dlx-queue, every delivery is dead-lettered")
	fs.StringVar(&o.DLXQueue, "dlx-queue", "", "declare a fanout exchange `NAME`.dlx and a queue NAME bound to it, set x-dead-letter-exchange on the queues, and count what arrives in NAME as dead-lettered")
	fs.StringVar(&o.Expiration, "expiration", "", "per-message TTL (expiration property, `ms`)")
	fs.DurationVar(&o.Duration, "duration", 0, "how long to publish (default 10s; with --count, a time limit)")
	fs.Int64Var(&o.Count, "count", 0, "publish `N` messages in total, split over the publishers, then stop (with no publishers: consume N)")
	fs.DurationVar(&o.Warmup, "warmup", 0, "leading part of the run excluded from rates and latencies")
	fs.IntVar(&o.PID, "pid", 0, "broker `PID`: report its RSS and CPU from /proc")
	fs.DurationVar(&o.Progress, "progress", time.Second, "print progress to stderr at this interval (0: never)")
	fs.BoolVar(&o.JSON, "json", false, "print the results as one JSON object on stdout")
	fs.DurationVar(&o.Drain, "drain", 3*time.Second, "after publishing stops, wait for confirms and consumers to catch up until nothing has moved for this long")
	fs.DurationVar(&o.DrainMax, "drain-max", time.Minute, "longest drain")
	fs.BoolVar(&o.Cleanup, "cleanup", true, "delete the queues and exchanges declared, at the end")
	fs.BoolVar(&o.Predeclared, "predeclared", false, "declare nothing: --queue (and --exchange) exist already")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 0, "heartbeat interval to negotiate (0: none)")
	fs.IntVar(&o.FlushBytes, "flush-bytes", 64<<10, "publisher output buffer written once it holds this many `bytes` (paced or confirm-waiting publishers write at once)")
	fs.DurationVar(&o.PaceQuantum, "pace-quantum", 200*time.Microsecond, "with --rate, messages due within this much of now are sent at once, so a publisher wakes at most once per quantum (accuracy vs CPU)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write warren-perf's own CPU profile to `file`")
	fs.Usage = func() {
		fmt.Fprint(out, `Usage:
  warren-perf [flags]              run a load test against an AMQP 0-9-1 broker
  warren-perf sink [--listen ADDR] a fake broker that swallows everything, to measure warren-perf itself

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func parseOptions(args []string, out io.Writer) (*options, error) {
	o := &options{}
	fs := newFlagSet(o, out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.QueueArgs, err = parseQueueArgs(o.QueueArgsRaw); err != nil {
		return nil, fmt.Errorf("--queue-args: %w", err)
	}
	if o.ConsumerArgs, err = parseQueueArgs(o.ConsumerArgsRaw); err != nil {
		return nil, fmt.Errorf("--consumer-args: %w", err)
	}
	switch {
	case o.Publishers < 0 || o.Consumers < 0:
		return nil, errors.New("--publishers and --consumers must be >= 0")
	case o.Publishers == 0 && o.Consumers == 0 && o.DLXQueue == "":
		return nil, errors.New("nothing to do: no publishers and no consumers")
	case o.Size < 16:
		return nil, errors.New("--size must be at least 16 (send time and sequence number)")
	case o.Confirm < 0 || o.Prefetch < 0 || o.Prefetch > 65535 || o.Fanout < 0 || o.Count < 0:
		return nil, errors.New("--confirm, --prefetch, --fanout and --count must be >= 0 (prefetch <= 65535)")
	case o.Rate < 0 || math.IsInf(o.Rate, 0) || math.IsNaN(o.Rate):
		return nil, errors.New("--rate must be >= 0")
	case o.Warmup < 0 || o.Duration < 0:
		return nil, errors.New("--warmup and --duration must be >= 0")
	case o.Predeclared && o.Queue == "" && o.Consumers > 0:
		return nil, errors.New("--predeclared needs --queue")
	case o.Predeclared && (o.Fanout > 0 || o.DLXQueue != ""):
		return nil, errors.New("--predeclared cannot be used with --fanout or --dlx-queue")
	case o.Fanout > 0 && o.ExchangeType != "direct" && o.ExchangeType != "fanout":
		return nil, errors.New("--fanout declares a fanout exchange: --exchange-type does not apply")
	}
	if o.MultiAckEvery < 1 {
		o.MultiAckEvery = 1
	}
	if !o.AutoAck && o.Prefetch > 0 && o.MultiAckEvery > o.Prefetch {
		return nil, fmt.Errorf("--multi-ack-every %d > --prefetch %d: consumers would stall", o.MultiAckEvery, o.Prefetch)
	}
	if o.Duration == 0 && o.Count == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Duration > 0 && o.Warmup >= o.Duration {
		return nil, errors.New("--warmup must be shorter than --duration")
	}
	if o.Expiration != "" {
		if _, err := strconv.ParseUint(o.Expiration, 10, 32); err != nil {
			return nil, errors.New("--expiration must be a number of milliseconds")
		}
	}
	return o, nil
}

// parseQueueArgs parses "k=v,k=v" (integers become longs, true/false
// bools, anything else strings) or a JSON object (integral numbers become
// longs, other numbers doubles; objects tables, arrays arrays).
func parseQueueArgs(s string) (amqp.Table, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "{") {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			return nil, err
		}
		return jsonTable(m), nil
	}
	t := amqp.Table{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		v = strings.TrimSpace(v)
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			t[k] = n
		} else if v == "true" || v == "false" {
			t[k] = v == "true"
		} else {
			t[k] = v
		}
	}
	return t, nil
}

func jsonTable(m map[string]any) amqp.Table {
	t := amqp.Table{}
	for k, v := range m {
		t[k] = jsonValue(v)
	}
	return t
}

func jsonValue(v any) any {
	switch v := v.(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		return jsonTable(v)
	case []any:
		a := make([]any, len(v))
		for i, x := range v {
			a[i] = jsonValue(x)
		}
		return a
	}
	return v // string, bool, nil
}
