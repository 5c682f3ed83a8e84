package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// TestMigrationGuide: issue 24 (must-show 3). docs/migration.md as a test:
// its command blocks run in order (with the warren binary built from this
// tree), against RabbitMQ 3.10.8 and a Warren, while a publisher and a
// consumer run through it from start to end, moved from RabbitMQ to
// Warren when the guide says so. Every message the publisher had
// confirmed reaches the consumer; neither sees an error it did not
// recover from.
func TestMigrationGuide(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the warren CLI against RabbitMQ")
	}
	rabbit := rabbitURL(t)
	if rabbit == "" {
		t.Skip("no RabbitMQ")
	}
	rmgmt := rabbitMgmtURL(t)
	doc, err := os.ReadFile("../docs/migration.md")
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]string{}
	var order []string
	for _, m := range regexp.MustCompile("(?s)```sh\n# step: ([a-z]+)\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		steps[m[1]] = m[2]
		order = append(order, m[1])
	}
	if strings.Join(order, ",") != "definitions,shovel,drained" {
		t.Fatalf("docs/migration.md's steps are %v; this test runs definitions, shovel, drained", order)
	}

	w := warrentest.Start(t)
	vhost := "mig-" + randomSuffix()
	rapi := func(method, path, body string) {
		t.Helper()
		req := fmt.Sprintf("-fsS -u guest:guest -X %s -H content-type:application/json", method)
		args := append(strings.Fields(req), rmgmt+path)
		if body != "" {
			args = append(args, "-d", body)
		}
		if out, err := exec.Command("curl", args...).CombinedOutput(); err != nil {
			t.Fatalf("curl %s %s: %v %s", method, path, err, out)
		}
	}
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is missing under CI=true")
		}
		t.Skip("the guide's commands use curl, which is missing")
	}
	rapi("PUT", "/api/vhosts/"+vhost, "")
	t.Cleanup(func() {
		exec.Command("curl", "-fsS", "-u", "guest:guest", "-X", "DELETE", rmgmt+"/api/vhosts/"+vhost).Run()
	})
	rapi("PUT", "/api/permissions/"+vhost+"/guest", `{"configure":".*","write":".*","read":".*"}`)
	ru := strings.TrimSuffix(rabbit, "/")
	rvh := ru + "/" + vhost
	setup, err := amqp.Dial(rvh)
	if err != nil {
		t.Fatal(err)
	}
	sch, _ := setup.Channel()
	if err := sch.ExchangeDeclare("orders.x", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sch.QueueDeclare("orders", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := sch.QueueBind("orders", "order.#", "orders.x", false, nil); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	wvh := strings.TrimSuffix(w.URL(), "/") + "/" + vhost

	// The publisher and the consumer, each moved when told.
	var (
		mu        sync.Mutex
		confirmed = map[int]bool{}
		received  = map[int]int{}
		errs      []string
	)
	report := func(who string, err error) {
		mu.Lock()
		errs = append(errs, who+": "+err.Error())
		mu.Unlock()
	}
	var stop atomic.Bool
	movePub, moveCons := make(chan struct{}), make(chan struct{})
	pubDone, consDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pubDone)
		url, i := rvh, 0
		for !stop.Load() {
			c, err := amqp.Dial(url)
			if err != nil {
				report("publisher", err)
				return
			}
			ch, _ := c.Channel()
			ch.Confirm(false)
			moved := false
			for !stop.Load() && !moved {
				dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "orders.x", "order.new", false, false,
					amqp.Publishing{Body: []byte(strconv.Itoa(i)), DeliveryMode: amqp.Persistent})
				if err != nil {
					report("publisher", err)
					c.Close()
					return
				}
				if dc.Wait() {
					mu.Lock()
					confirmed[i] = true
					mu.Unlock()
				}
				i++
				select {
				case <-movePub:
					moved, url = true, wvh // its confirms are in: move
					movePub = nil
				default:
				}
				time.Sleep(2 * time.Millisecond)
			}
			c.Close()
		}
	}()
	go func() {
		defer close(consDone)
		url := rvh
		for !stop.Load() {
			c, err := amqp.Dial(url)
			if err != nil {
				report("consumer", err)
				return
			}
			ch, _ := c.Channel()
			ch.Qos(50, 0, false)
			ds, err := ch.Consume("orders", "", false, false, false, false, nil)
			if err != nil {
				report("consumer", err)
				c.Close()
				return
			}
			moved := false
			for !moved && !stop.Load() {
				select {
				case d, ok := <-ds:
					if !ok {
						report("consumer", fmt.Errorf("deliveries closed"))
						return
					}
					n, _ := strconv.Atoi(string(d.Body))
					mu.Lock()
					received[n]++
					mu.Unlock()
					if err := d.Ack(false); err != nil {
						report("consumer", err)
					}
				case <-moveCons:
					moved, url = true, wvh // what it did not take goes back, and over
					moveCons = nil
				case <-time.After(100 * time.Millisecond):
				}
			}
			c.Close()
		}
	}()

	bin := buildWarren(t)
	dir := t.TempDir()
	run := func(step string) {
		t.Helper()
		cmd := exec.Command("sh", "-e", "-c", steps[step])
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"),
			"RABBIT_API="+rmgmt, "RABBIT_AMQP="+ru, "WARREN_API="+w.MgmtURL(), "VHOST="+vhost)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("step %s: %v\n%s", step, err, out)
		}
		t.Logf("step %s:\n%s", step, out)
	}
	count := func(url string) int {
		c, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ch, _ := c.Channel()
		q, err := ch.QueueDeclarePassive("orders", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	progress := func() int { mu.Lock(); defer mu.Unlock(); return len(received) }

	time.Sleep(500 * time.Millisecond)
	run("definitions")
	run("shovel")
	time.Sleep(500 * time.Millisecond)
	moveCons <- struct{}{}
	before := progress()
	testutil.Eventually(t, 20*time.Second, "the consumer receiving on Warren", func() bool { return progress() > before+20 })
	movePub <- struct{}{}
	time.Sleep(time.Second)
	testutil.Eventually(t, 30*time.Second, "RabbitMQ's queue drained", func() bool { return count(rvh) == 0 })
	run("drained")
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	<-pubDone
	testutil.Eventually(t, 30*time.Second, "every confirmed message consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range confirmed {
			if received[id] == 0 {
				return false
			}
		}
		return true
	})
	<-consDone
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, k := range received {
		if k > 1 {
			dups += k - 1
		}
	}
	t.Logf("%d messages confirmed, %d received, %d delivered twice", len(confirmed), len(received), dups)
	if len(errs) > 0 {
		t.Fatalf("errors the clients did not recover from: %v", errs)
	}
	if len(confirmed) < 100 {
		t.Fatalf("only %d messages went through the migration", len(confirmed))
	}
}
