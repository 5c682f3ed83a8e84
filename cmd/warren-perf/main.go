// Command warren-perf is a load generator for AMQP 0-9-1 brokers (Warren,
// RabbitMQ), in the spirit of RabbitMQ's PerfTest and lavinmqperf. It
// runs publishers and consumers (one connection each) against a queue it
// declares, and reports publish, confirm, consume and dead-letter rates,
// end-to-end latency percentiles, and the broker's RSS and CPU.
//
// It speaks AMQP through internal/perfclient, a lean client on Warren's
// codec that publishes without a system call per message and parses
// deliveries without allocating, so that it is not the bottleneck (see
// "Ceiling" below).
//
// # Examples
//
//	go build -o warren-perf ./cmd/warren-perf && go build -o warren ./cmd/warren
//	./warren --amqp-addr 127.0.0.1:5680 --data-dir /tmp/wp-data & PID=$!  # not go run: --pid wants the broker's PID
//	U=amqp://guest:guest@127.0.0.1:5680/
//
//	# 10s, 1 publisher, 1 consumer, transient 16-byte messages, as fast as possible
//	warren-perf --uri $U --prefetch 1000 --pid $PID
//	# persistent, confirms (100 in flight), manual acks every 20 messages
//	warren-perf --uri $U --persistent --durable-queue --confirm 100 --prefetch 200 --multi-ack-every 20 --warmup 2s
//	# latency at a fixed rate: 2 publishers x 5000 msg/s, JSON on stdout
//	warren-perf --uri $U --publishers 2 --rate 5000 --prefetch 100 --duration 30s --warmup 5s --json
//	# one message to 4 queues (fanout exchange), 4 consumers
//	warren-perf --uri $U --fanout 4 --consumers 4 --auto-ack
//	# quorum queue with a length limit
//	warren-perf --uri $U --queue-args 'x-queue-type=quorum,x-max-length=100000' --confirm 500
//	# nack into a DLQ: dead-letters/s
//	warren-perf --uri $U --nack --dlx-queue perf-dlq --prefetch 500 --multi-ack-every 50
//	# TTL expiry into a DLQ (no consumers on the main queue): dead-letters/s
//	warren-perf --uri $U --consumers 0 --queue-args x-message-ttl=1000 --dlx-queue perf-dlq --rate 10000 --drain 5s
//	# a fixed number of messages instead of a duration
//	warren-perf --uri $U --count 1000000 --confirm 1000 --publishers 4 --consumers 4 --prefetch 500
//
// # What is measured
//
// The run starts once every connection is up. Publishers stop at the end
// of --duration (or after --count messages in all); then warren-perf
// drains: it waits for outstanding confirms, for consumers to receive
// every message published (times the number of queues that have a
// consumer) and, with --dlx-queue, for the dead-letters, until nothing
// has moved for --drain (3s) or --drain-max (1m) has passed. Publishers
// that are still blocked are then cut off.
//
//   - Counts (published, confirmed, nacked, returned, consumed,
//     dead_lettered) are totals over the whole run, warm-up and drain
//     included. complete tells whether everything expected arrived.
//   - Rates (msgs/s) cover the measurement window: from the end of
//     --warmup to the end of --duration. With --count, each rate runs from
//     the end of the warm-up to that counter's last event (so a count
//     publish rate without confirms is the rate of writing to the socket).
//   - Latency is the consumer's receipt time minus the send time the
//     publisher wrote in the first 8 bytes of the body (unix nanoseconds,
//     big-endian; then a sequence number), both on this machine's clock,
//     for messages received after the warm-up (drain included), in a
//     log-bucketed histogram (error < 0.4%, no allocation per message).
//     dead_letter_latency_us is publish to arrival in the DLQ.
//   - With --pid, the broker's RSS (VmRSS of /proc/PID/status, sampled
//     every 50ms: start, peak, end) and CPU (utime+stime of
//     /proc/PID/stat over the window, in % of one core). client_cpu_percent
//     is warren-perf's own CPU over the window.
//
// Progress goes to stderr every --progress (1s): rates, latency p50/p99 of
// the interval, broker RSS and CPU, client CPU. The result goes to stdout,
// as text or, with --json, one JSON object (type Result; field names in
// snake_case: publish_rate, confirm_rate, consume_rate, dead_letter_rate,
// latency_us.p50/p99/p999/max, broker.rss_peak_mib, broker.cpu_percent,
// client_cpu_percent, complete, errors...). The exit status is 1 when the
// run had errors (a channel or connection closed by the broker, a
// consumer cancelled, confirms never received); the results are printed
// all the same.
//
// Topology: by default one queue (warren-perf-<random>, or --queue) on the
// default exchange; --exchange NAME declares that exchange (type
// --exchange-type) and binds the queue with --routing-key (default the
// queue name); --fanout N declares a fanout exchange and N queues
// QUEUE-1..QUEUE-N, consumer i consuming from queue i mod N. --dlx-queue
// NAME declares a fanout exchange NAME.dlx (or uses the queue's
// x-dead-letter-exchange from --queue-args), the queue NAME bound to it
// and a no-ack consumer on it, and sets x-dead-letter-exchange on the
// queues. x-queue-type quorum or stream implies durable queues. What was
// declared is deleted at the end unless --cleanup=false; --predeclared
// declares nothing.
//
// Pacing (--rate, per publisher): message n of a publisher is due at
// start + n/rate (publishers offset evenly), whatever the time taken
// before, so the average rate is exact; a publisher more than a second
// behind does not burst to catch up. Publishers sleep with nanosleep(2)
// and a 1ns timer slack (Go's timers are ~1ms late on this kind of
// machine); messages due within --pace-quantum (200µs) are sent together,
// since each wake-up costs ~30µs of CPU on a VM. At 10,000 msg/s a paced
// publisher sends 2-3 messages per wake-up and uses ~20% of a core
// (~10% with --pace-quantum 1ms).
//
// # Ceiling
//
// "warren-perf sink" is a fake broker that swallows publishes (acking
// confirms with one multiple ack per read) and pushes deliveries to
// consumers as fast as the socket takes them (respecting the prefetch for
// manual-ack consumers; see sink.go). Against it, warren-perf measures
// itself:
//
//	warren-perf sink --listen 127.0.0.1:5673 &
//	S=amqp://guest:guest@127.0.0.1:5673/
//	warren-perf --uri $S --consumers 0                                # publish only
//	warren-perf --uri $S --consumers 0 --confirm 1000                 # publish, confirms
//	warren-perf --uri $S --publishers 0 --auto-ack                    # consume only, no-ack
//	warren-perf --uri $S --publishers 0 --prefetch 1000               # consume only, single acks
//
// Figures on the 2-core VM this was written on (10s runs after a 2s
// warm-up, 16-byte messages, one publisher or consumer, the sink on the
// same machine; noisy):
//
//	publish only                        4.3M msg/s   (client 57% of a core)
//	publish, confirms (1000 in flight)  3.2M msg/s   (59%)
//	publish only, 1 KiB messages        1.0M msg/s   (~1 GiB/s, 54%)
//	consume only, no-ack                4.8M msg/s   (100%)
//	consume only, single acks, qos 1000 2.7M msg/s   (73%)
//
// For comparison, amqp091-go tops out near 170k publishes/s on one core
// here, and Warren and RabbitMQ themselves at a few hundred thousand.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "warren-perf:", err)
		os.Exit(1)
	}
}

// run is the whole command: "sink [flags]" runs the sink until ctx is
// done; otherwise it runs a load test and prints the results (text, or
// JSON with --json) to stdout, progress to stderr. A run that ends with
// errors (a channel or connection closed by the broker...) still prints
// its results, and returns an error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "sink" {
		return runSink(ctx, args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "stream" {
		return runStream(ctx, args[1:], stdout, stderr)
	}
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := runLoad(ctx, o, stderr)
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printText(stdout, res)
	}
	if len(res.Errors) > 0 {
		return errors.New(strings.Join(res.Errors, "; "))
	}
	return nil
}
