package main

// -streams (issue 25): streams over both protocols, the same client code
// and arguments against Warren and RabbitMQ (its rabbitmq_stream plugin
// on -rabbit-stream, 127.0.0.1:5552):
//
//	stream-publish       stream protocol, RabbitMQ's Go stream client:
//	                     confirmed msgs/s, 2 producers, batches of 1,000
//	                     16 B messages sent with BatchSend (no client-side
//	                     batching delay), 100,000 unconfirmed each; 1 MiB
//	                     socket buffers (the client's 8 KiB default is the
//	                     limit otherwise)
//	stream-consume       stream protocol: msgs/s reading -stream-count
//	                     messages from first (initial credit 10)
//	stream-publish-perf  stream protocol, warren-perf stream (a light
//	                     client: messages encoded once, Publish frames of
//	                     1,000, 2 producers, 100,000 unconfirmed each)
//	stream-consume-perf  stream protocol, warren-perf stream: msgs/s
//	                     reading -stream-count messages from first, its
//	                     entries walked, not decoded (credit 10)
//	stream-publish-091   AMQP 0-9-1 (warren-perf, as every other scenario):
//	                     confirmed msgs/s, 2 publishers, 1,000 unconfirmed
//	                     each, 16 B
//	stream-consume-091   AMQP 0-9-1 (warren-perf): msgs/s reading
//	                     -stream-count messages from first, prefetch 1,000,
//	                     an ack with multiple every 100
//
// A fresh Warren process per run; each run uses a new stream, deleted
// after. Messages for the consume runs are written by the stream
// protocol first (not timed).
//
//	go run ./bench -streams -rounds 3

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	samqp "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

func runStreams(o options, count, perfCount int, rabbitStream string, log io.Writer) error {
	bin, err := buildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	r := &runner{o: o, log: log, bin: bin}
	fmt.Fprintf(log, "bench -streams: %d rounds, %s per throughput run, %d messages per consume run, %s\n",
		o.rounds, o.duration, count, time.Now().UTC().Format(time.RFC3339))
	scs := []struct{ name, what string }{
		{"stream-publish", "stream protocol, confirmed msgs/s (2 producers, BatchSend of 1,000 x 16 B)"},
		{"stream-consume", fmt.Sprintf("stream protocol, msgs/s reading %d from first", count)},
		{"stream-publish-perf", "stream protocol (warren-perf stream), confirmed msgs/s (2 producers, frames of 1,000 x 16 B, 100,000 unconfirmed each)"},
		{"stream-consume-perf", fmt.Sprintf("stream protocol (warren-perf stream), msgs/s reading %d from first (credit 10)", perfCount)},
		{"stream-publish-091", "AMQP 0-9-1 into a stream (warren-perf), confirmed msgs/s (2 publishers, 1,000 in flight each)"},
		{"stream-consume-091", fmt.Sprintf("AMQP 0-9-1 from a stream (warren-perf), msgs/s reading %d from first (prefetch 1,000)", count)},
	}
	if o.only != nil {
		scs = slices.DeleteFunc(scs, func(s struct{ name, what string }) bool { return !o.only[s.name] })
	}
	for _, s := range scs {
		r.results = append(r.results, &scenarioResult{Name: s.name, What: s.what, Unit: "msgs/s", Higher: true, Target: 3})
	}
	brokers := []string{"warren", "rabbitmq"}
	if o.skipRabbit {
		brokers = brokers[:1]
	}
	for round := 1; round <= o.rounds; round++ {
		for i, s := range scs {
			order := brokers
			if round%2 == 0 && len(brokers) == 2 {
				order = []string{"rabbitmq", "warren"}
			}
			for _, on := range order {
				n := count
				if s.name == "stream-consume-perf" {
					n = perfCount
				}
				v, extra, err := r.streamRun(s.name, on, n, rabbitStream)
				if err != nil {
					return fmt.Errorf("round %d, %s on %s: %w", round, s.name, on, err)
				}
				fmt.Fprintf(log, "round %d  %-20s on %-8s %12.0f msgs/s %s\n", round, s.name, on, v, extra)
				r.results[i].Samples = append(r.results[i].Samples, sample{Broker: on, Round: round, Value: v, Extra: extra})
			}
		}
	}
	r.summarize()
	r.printTable(log)
	if o.out != "" {
		return r.write(o.out)
	}
	return nil
}

// streamRun runs one scenario on one broker.
func (r *runner) streamRun(name, on string, count int, rabbitStream string) (float64, string, error) {
	amqpURI, streamAddr := r.o.rabbitURI, rabbitStream
	pid := 0
	if on == "warren" {
		sa, err := freeAddr()
		if err != nil {
			return 0, "", err
		}
		p, err := r.startWarrenWith("--stream-addr", sa)
		if err != nil {
			return 0, "", err
		}
		defer p.stop()
		if err := waitPort(sa, 30*time.Second, p.done); err != nil {
			return 0, "", err
		}
		amqpURI, streamAddr, pid = "amqp://guest:guest@"+r.o.warrenAddr+"/", sa, p.cmd.Process.Pid
	} else {
		var err error
		if pid, err = rabbitPID(); err != nil {
			return 0, "", err
		}
		settle(pid)
	}
	// The client's socket buffers (8 KiB by default) are what limit it
	// otherwise, with both brokers nearly idle (issue 25's note).
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri("rabbitmq-stream://guest:guest@" + streamAddr + "/%2f").
		SetMaxProducersPerClient(1).SetMaxConsumersPerClient(1).SetNoDelay(true).SetWriteBuffer(1 << 20).SetReadBuffer(1 << 20))
	if err != nil {
		return 0, "", err
	}
	defer env.Close()
	sname := fmt.Sprintf("bench-%s-%d", name, time.Now().UnixNano())
	if err := env.DeclareStream(sname, nil); err != nil {
		return 0, "", err
	}
	defer env.DeleteStream(sname)
	cpu0 := procCPU(pid)
	start := time.Now()
	var v float64
	switch name {
	case "stream-publish":
		v, err = streamPublish(env, sname, r.o.duration, r.o.warmup, 0)
	case "stream-consume":
		if _, err = streamPublish(env, sname, 0, 0, count); err == nil {
			cpu0, start = procCPU(pid), time.Now()
			v, err = streamConsume(env, sname, count)
		}
	case "stream-publish-perf":
		v, err = r.streamPerf(streamAddr, func(p *streamPerfResult) float64 { return p.ConfirmRate },
			"--stream", sname, "--mode", "publish", "--producers", "2", "--batch", "1000", "--inflight", "100000", "--size", "16",
			"--duration", r.o.duration.String(), "--warmup", r.o.warmup.String())
	case "stream-consume-perf":
		// filled by warren-perf stream (the Go client would take minutes)
		if _, err = r.streamPerf(streamAddr, func(*streamPerfResult) float64 { return 0 },
			"--stream", sname, "--mode", "publish", "--count", fmt.Sprint(count), "--batch", "1000", "--inflight", "100000"); err == nil {
			cpu0, start = procCPU(pid), time.Now()
			v, err = r.streamPerf(streamAddr, func(p *streamPerfResult) float64 { return p.ConsumeRate },
				"--stream", sname, "--mode", "consume", "--count", fmt.Sprint(count), "--credit", "10")
		}
	case "stream-publish-091":
		v, err = r.perf(amqpURI, pid, func(p *perfResult) float64 { return p.ConfirmRate },
			"--predeclared", "--queue", sname, "--publishers", "2", "--consumers", "0", "--size", "16", "--confirm", "1000",
			"--duration", r.o.duration.String(), "--warmup", r.o.warmup.String())
	case "stream-consume-091":
		if _, err = streamPublish(env, sname, 0, 0, count); err == nil {
			cpu0, start = procCPU(pid), time.Now()
			v, err = r.perf(amqpURI, pid, func(p *perfResult) float64 { return p.ConsumeRate },
				"--predeclared", "--queue", sname, "--publishers", "0", "--consumers", "1", "--count", fmt.Sprint(count),
				"--prefetch", "1000", "--multi-ack-every", "100", "--consumer-args", "x-stream-offset=first", "--drain", "1s")
		}
	}
	if err != nil {
		return 0, "", err
	}
	cpu := (procCPU(pid) - cpu0) / time.Since(start).Seconds() * 100
	return v, fmt.Sprintf("(broker CPU %.0f%%)", cpu), nil
}

// perf runs warren-perf (the load tool of every other scenario, the same
// binary and arguments against both brokers) and returns its metric.
func (r *runner) perf(uri string, pid int, metric func(*perfResult) float64, args ...string) (float64, error) {
	args = append([]string{"--uri", uri, "--pid", fmt.Sprint(pid), "--json", "--progress", "0"}, args...)
	cmd := exec.Command(filepath.Join(r.bin, "warren-perf"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("warren-perf %s: %v\n%s", strings.Join(args, " "), err, lastLines(errOut.String(), 20))
	}
	var res perfResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return 0, fmt.Errorf("warren-perf output: %v\n%s", err, out.String())
	}
	if len(res.Errors) > 0 {
		return 0, fmt.Errorf("warren-perf reported errors: %v", res.Errors)
	}
	return metric(&res), nil
}

// streamPerfResult is warren-perf stream's JSON.
type streamPerfResult struct {
	ConfirmRate      float64 `json:"confirm_rate"`
	ConsumeRate      float64 `json:"consume_rate"`
	ClientCPUPercent float64 `json:"client_cpu_percent"`
}

// streamPerf runs warren-perf stream (a light stream-protocol client: the
// same binary and arguments against both brokers) and returns its metric.
func (r *runner) streamPerf(addr string, metric func(*streamPerfResult) float64, args ...string) (float64, error) {
	args = append([]string{"stream", "--addr", addr}, args...)
	cmd := exec.Command(filepath.Join(r.bin, "warren-perf"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("warren-perf %s: %v\n%s", strings.Join(args, " "), err, lastLines(errOut.String(), 20))
	}
	var res streamPerfResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return 0, fmt.Errorf("warren-perf stream output: %v\n%s", err, out.String())
	}
	return metric(&res), nil
}

// procCPU is a process's CPU seconds so far (0 when unknown).
func procCPU(pid int) float64 { return float64(max(cpuTicks(pid), 0)) / 100 }

// streamPublish publishes with 2 producers, for d after warmup (the rate
// of what was confirmed after the warmup), or count messages in all.
func streamPublish(env *stream.Environment, name string, d, warmup time.Duration, count int) (float64, error) {
	const producers, batch = 2, 1000
	var confirmed atomic.Int64
	var failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	body := make([]byte, 16)
	per := count / producers
	for range producers {
		p, err := env.NewProducer(name, stream.NewProducerOptions().SetQueueSize(100000).SetBatchSize(batch))
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			var mine atomic.Int64
			ch := p.NotifyPublishConfirmation()
			go func() {
				for cs := range ch {
					for _, c := range cs {
						if c.IsConfirmed() {
							confirmed.Add(1)
						}
						mine.Add(1)
					}
				}
				close(done)
			}()
			msgs := make([]message.StreamMessage, batch)
			for i := range msgs {
				msgs[i] = samqp.NewMessage(body)
			}
			sent := 0
			for {
				select {
				case <-stop:
					goto wait
				default:
				}
				if count > 0 && sent >= per {
					break
				}
				if err := p.BatchSend(msgs); err != nil {
					break
				}
				sent += batch
			}
		wait:
			// every message sent is confirmed before the producer closes
			// (a close fails what is still unconfirmed)
			for deadline := time.Now().Add(time.Minute); mine.Load() < int64(sent) && failed.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if mine.Load() < int64(sent) {
				failed.Add(int64(sent) - mine.Load())
			}
			p.Close()
			<-done
		}()
	}
	if count > 0 {
		wg.Wait()
		if failed.Load() > 0 {
			return 0, fmt.Errorf("%d not confirmed", failed.Load())
		}
		return 0, nil
	}
	time.Sleep(warmup)
	c0, t0 := confirmed.Load(), time.Now()
	time.Sleep(d)
	c1, t1 := confirmed.Load(), time.Now()
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		return 0, fmt.Errorf("%d not confirmed", failed.Load())
	}
	return float64(c1-c0) / t1.Sub(t0).Seconds(), nil
}

// streamConsume reads count messages from first.
func streamConsume(env *stream.Environment, name string, count int) (float64, error) {
	var n atomic.Int64
	done := make(chan struct{})
	start := time.Now()
	c, err := env.NewConsumer(name, func(cc stream.ConsumerContext, m *samqp.Message) {
		if n.Add(1) == int64(count) {
			close(done)
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()).SetInitialCredits(10))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("read %d of %d", n.Load(), count)
	}
	return float64(count) / time.Since(start).Seconds(), nil
}
