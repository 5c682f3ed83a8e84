package main

// -shovel (issue 24): a dynamic shovel moving one queue between RabbitMQ
// and Warren, defined on Warren (bridge) and, the same, on RabbitMQ (its
// shovel plugin), in both directions, between the same two brokers:
//
//	shovel-r2w   RabbitMQ's queue into Warren's
//	shovel-w2r   Warren's queue into RabbitMQ's
//
// Each run fills the source with -shovel-count persistent 16 B messages,
// defines the shovel (on-confirm, prefetch 1000, src-delete-after
// queue-length) and times it from the definition until every message is
// in the destination: msgs/s. A fresh Warren process per run.
//
//	go run ./bench -shovel -rounds 3

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const rabbitMgmt = "http://127.0.0.1:15672"

func runShovel(o options, count int, log io.Writer) error {
	bin, err := buildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	if _, err := rabbitPID(); err != nil {
		return fmt.Errorf("%w (the shovel runs need RabbitMQ with rabbitmq_shovel enabled)", err)
	}
	r := &runner{o: o, log: log, bin: bin}
	fmt.Fprintf(log, "bench -shovel: %d rounds, %d persistent 16 B messages per run, %s\n", o.rounds, count, time.Now().UTC().Format(time.RFC3339))
	scs := []struct{ name, what string }{
		{"shovel-r2w", "a shovel moving a RabbitMQ queue into Warren (on-confirm, prefetch 1000): msgs/s"},
		{"shovel-w2r", "a shovel moving a Warren queue into RabbitMQ (on-confirm, prefetch 1000): msgs/s"},
	}
	for _, s := range scs {
		r.results = append(r.results, &scenarioResult{Name: s.name, What: s.what, Unit: "msgs/s", Higher: true, Target: 1})
	}
	for round := 1; round <= o.rounds; round++ {
		for i, s := range scs {
			order := []string{"warren", "rabbitmq"}
			if round%2 == 0 {
				order = []string{"rabbitmq", "warren"}
			}
			for _, on := range order {
				v, extra, err := r.shovelRun(s.name == "shovel-r2w", on, count)
				if err != nil {
					return fmt.Errorf("round %d, %s defined on %s: %w", round, s.name, on, err)
				}
				fmt.Fprintf(log, "round %d  %-12s on %-8s %10.1f msgs/s %s\n", round, s.name, on, v, extra)
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

// shovelRun moves count messages with a shovel defined on broker "on".
func (r *runner) shovelRun(intoWarren bool, on string, count int) (float64, string, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return 0, "", err
	}
	dir, err := os.MkdirTemp("", "warren-bench-data-")
	if err != nil {
		return 0, "", err
	}
	cmd := exec.Command(filepath.Join(r.bin, "warren"), "--amqp-addr", r.o.warrenAddr, "--http-addr", httpAddr,
		"--data-dir", dir, "--log-level", "warn")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	p := &warrenProc{cmd: cmd, dir: dir, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	defer p.stop()
	if err := waitPort(r.o.warrenAddr, 30*time.Second, p.done); err != nil {
		return 0, "", fmt.Errorf("warren did not start: %v\n%s", err, out.String())
	}
	if err := waitPort(httpAddr, 30*time.Second, p.done); err != nil {
		return 0, "", err
	}
	warrenURI := "amqp://guest:guest@" + r.o.warrenAddr + "/"
	rabbitURI := r.o.rabbitURI
	name := fmt.Sprintf("bench-shovel-%d", time.Now().UnixNano())
	srcURI, destURI := rabbitURI, warrenURI
	if !intoWarren {
		srcURI, destURI = warrenURI, rabbitURI
	}
	defer deleteQueue(rabbitURI, name)
	if err := fill(srcURI, name, count); err != nil {
		return 0, "", fmt.Errorf("filling the source: %w", err)
	}
	if err := declareQueue(destURI, name+"-dest"); err != nil {
		return 0, "", err
	}
	defer deleteQueue(rabbitURI, name+"-dest")
	// The same definition on either broker: its own side is amqp://.
	local := func(u string) string {
		if (on == "warren") == (u == warrenURI) {
			return "amqp://"
		}
		return strings.TrimSuffix(u, "/") + "/%2F"
	}
	api := "http://" + httpAddr
	if on == "rabbitmq" {
		api = rabbitMgmt
	}
	value := map[string]any{"src-uri": local(srcURI), "src-queue": name, "dest-uri": local(destURI),
		"dest-queue": name + "-dest", "ack-mode": "on-confirm", "src-prefetch-count": 1000, "src-delete-after": "queue-length"}
	start := time.Now()
	if st, body, err := call("PUT", api+"/api/parameters/shovel/%2F/"+url.PathEscape(name), map[string]any{"value": value}); err != nil || st != 201 {
		return 0, "", fmt.Errorf("PUT shovel on %s: %d %s %v", on, st, body, err)
	}
	for {
		n, err := queueLen(destURI, name+"-dest")
		if err != nil {
			return 0, "", err
		}
		if n >= count {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return 0, "", fmt.Errorf("%d of %d moved after 10 minutes", n, count)
		}
		time.Sleep(20 * time.Millisecond)
	}
	el := time.Since(start)
	call("DELETE", api+"/api/parameters/shovel/%2F/"+url.PathEscape(name), nil)
	return float64(count) / el.Seconds(), fmt.Sprintf("(%d in %s)", count, el.Round(time.Millisecond)), nil
}

func call(method, u string, body any) (int, string, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return 0, "", err
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// fill declares queue q at uri and puts count persistent 16 B messages
// in it, with confirms.
func fill(uri, q string, count int) error {
	c, err := amqp.Dial(uri)
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	body := bytes.Repeat([]byte("x"), 16)
	var last *amqp.DeferredConfirmation
	for i := range count {
		if last, err = ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
			amqp.Publishing{Body: body, DeliveryMode: amqp.Persistent}); err != nil {
			return err
		}
		if i%2000 == 1999 && !last.Wait() {
			return fmt.Errorf("nacked")
		}
	}
	if last != nil && !last.Wait() {
		return fmt.Errorf("nacked")
	}
	return nil
}

func declareQueue(uri, q string) error {
	c, err := amqp.Dial(uri)
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	return err
}

func queueLen(uri, q string) (int, error) {
	c, err := amqp.Dial(uri)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return 0, err
	}
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	return st.Messages, err
}
