// Command orders-dlq is a dead-letter queue that works, shown step by step
// against a running broker (Warren or RabbitMQ):
//
//	go run ./examples/orders-dlq --url amqp://guest:guest@localhost:5672/
//
// # Topology
//
//	publisher --(default exchange, key orders.work)--> orders.work
//	    orders.work    x-dead-letter-exchange=orders.dlx  x-dead-letter-routing-key=failed
//	    orders.ttl     the same, plus x-message-ttl (--ttl)
//	    orders.bounded the same, plus x-max-length=2
//	    orders.limited the same, plus x-delivery-limit (--delivery-limit)
//	orders.dlx (direct) --failed--> orders.dlq   (no dead-letter exchange of its own)
//
// There is no "send to DLQ" operation in AMQP: a dead-letter exchange is a
// queue argument, and a message reaches orders.dlq as a side effect of one of
// the triggers below. Every dead-lettered message carries an x-death header
// whose reason tells the triggers apart. Because every source queue sets
// x-dead-letter-routing-key=failed, one binding on orders.dlx catches them
// all, whatever routing key the message was published with. orders.dlq has
// no dead-letter exchange itself, so a message that keeps failing cannot
// cycle back into the work queue.
//
// The program walks through seven steps and prints what it observes:
//
//  1. basic.nack(requeue=false) on orders.work: x-death reason rejected.
//  2. x-message-ttl expiry on orders.ttl (nobody consumes it): reason expired.
//  3. Three messages into orders.bounded (x-max-length=2): the head, m-1,
//     the oldest message, is dead-lettered with reason maxlen.
//  4. A consumer that always answers basic.nack(requeue=true): 200
//     deliveries, 199 redelivered, nothing dead-lettered, the message still
//     queued. requeue=true never consults the dead-letter exchange.
//  5. The same loop, the seed's exact basicNack(tag, false, true), on
//     orders.limited, stopped by x-delivery-limit: after limit+1 deliveries
//     the message reaches orders.dlq with reason delivery_limit. (Warren
//     accepts x-delivery-limit on classic queues; RabbitMQ only on quorum
//     queues, so against RabbitMQ this step prints a note and is skipped.)
//  6. One retry on the redelivered flag: requeue the first delivery, reject
//     the redelivery to orders.dlq.
//  7. A delay queue: orders.retry rejects, the message is dead-lettered into
//     orders.delay, whose x-message-ttl expires it back into the work exchange
//     "orders", so it is retried --ttl later. Its x-death then holds both
//     events, most recent first.
//
// Every queue and exchange is deleted before it is declared and again at the
// end, so the program can run repeatedly against the same broker (with any
// --ttl). Do not run it against a broker where these names are in real use.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Names of the topology.
const (
	workQueue    = "orders.work"
	ttlQueue     = "orders.ttl"
	boundedQueue = "orders.bounded"
	limitedQueue = "orders.limited"
	dlx          = "orders.dlx"
	dlrk         = "failed"
	dlq          = "orders.dlq"

	// Step 7, the delay-queue retry.
	workExchange = "orders"        // the work exchange messages are published to
	retryQueue   = "orders.retry"  // the work queue of step 7
	retryKey     = "order.created" // routes workExchange -> retryQueue
	retryDLX     = "orders.retry.dlx"
	delayQueue   = "orders.delay" // x-message-ttl, dead-letters back to workExchange
	delayKey     = "delay"
)

type config struct {
	URL           string        // broker URL
	TTL           time.Duration // x-message-ttl of orders.ttl and orders.delay
	Loop          int           // deliveries in the requeue=true loop (step 4)
	DeliveryLimit int           // x-delivery-limit of orders.limited (step 5)
	Timeout       time.Duration // how long to wait for any expected message
}

func main() {
	var cfg config
	flag.StringVar(&cfg.URL, "url", "amqp://guest:guest@localhost:5672/", "broker URL")
	flag.DurationVar(&cfg.TTL, "ttl", time.Second, "x-message-ttl of orders.ttl and of the delay queue orders.delay")
	flag.IntVar(&cfg.Loop, "loop", 200, "deliveries in the requeue=true loop")
	flag.IntVar(&cfg.DeliveryLimit, "delivery-limit", 5, "x-delivery-limit of orders.limited")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "how long to wait for an expected message")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// demo holds the connection and the channel the steps share.
type demo struct {
	ctx  context.Context
	cfg  config
	out  io.Writer
	conn *amqp.Connection
	ch   *amqp.Channel
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	d := &demo{ctx: ctx, cfg: cfg, out: out, conn: conn}
	if err := d.reopen(); err != nil {
		return err
	}
	defer d.cleanup()

	// The dead-letter exchange and the DLQ shared by steps 1 to 6.
	if err := d.exchange(dlx); err != nil {
		return err
	}
	if err := d.queue(dlq, nil); err != nil {
		return err
	}
	if err := d.ch.QueueBind(dlq, dlrk, dlx, false, nil); err != nil {
		return err
	}

	steps := []func() error{
		d.nack, d.ttlExpiry, d.overflow, d.requeueLoop,
		d.deliveryLimit, d.retryOnce, d.delayQueue,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
		fmt.Fprintln(out)
	}
	return nil
}

// deadLettering is the argument table every work queue of steps 1 to 6
// starts from: failures go to orders.dlx with routing key "failed".
func deadLettering() amqp.Table {
	return amqp.Table{
		"x-dead-letter-exchange":    dlx,
		"x-dead-letter-routing-key": dlrk,
	}
}

// Step 1: basic.nack with requeue=false dead-letters with reason "rejected".
func (d *demo) nack() error {
	if err := d.queue(workQueue, deadLettering()); err != nil {
		return err
	}
	if err := d.publish("", workQueue, order("m-0"), amqp.Publishing{}); err != nil {
		return err
	}
	m, err := d.get(workQueue)
	if err != nil {
		return err
	}
	if err := m.Nack(false, false); err != nil { // requeue=false
		return err
	}
	dead, err := d.get(dlq)
	if err != nil {
		return err
	}
	d.printDeath("x-death after basicNack(requeue=false)", dead)
	return nil
}

// Step 2: a message nobody consumes within x-message-ttl is dead-lettered
// with reason "expired".
func (d *demo) ttlExpiry() error {
	args := deadLettering()
	args["x-message-ttl"] = d.cfg.TTL.Milliseconds()
	if err := d.queue(ttlQueue, args); err != nil {
		return err
	}
	if err := d.publish("", ttlQueue, order("m-ttl"), amqp.Publishing{}); err != nil {
		return err
	}
	dead, err := d.get(dlq)
	if err != nil {
		return err
	}
	d.printDeath("x-death after x-message-ttl expiry", dead)
	return nil
}

// Step 3: over x-max-length the queue drops from the head, so the message
// dead-lettered is the oldest one, m-1, not the one that just arrived.
func (d *demo) overflow() error {
	args := deadLettering()
	args["x-max-length"] = int32(2)
	if err := d.queue(boundedQueue, args); err != nil {
		return err
	}
	for _, id := range []string{"m-1", "m-2", "m-3"} {
		if err := d.publish("", boundedQueue, order(id), amqp.Publishing{}); err != nil {
			return err
		}
	}
	dead, err := d.get(dlq)
	if err != nil {
		return err
	}
	d.printDeath("x-death after x-max-length overflow", dead)
	fmt.Fprintf(d.out, "body %s\n", dead.Body)
	kept, err := d.drain(boundedQueue)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "still in %s %v\n", boundedQueue, kept)
	return nil
}

// Step 4: requeue=true is not a dead-letter trigger. A consumer that always
// requeues sees the same message forever; the queue depth stays at 1, so a
// depth alarm never fires either.
func (d *demo) requeueLoop() error {
	if err := d.queue(workQueue, deadLettering()); err != nil {
		return err
	}
	if err := d.publish("", workQueue, order("poison"), amqp.Publishing{}); err != nil {
		return err
	}
	msgs, cancel, err := d.consumer(workQueue)
	if err != nil {
		return err
	}
	deliveries, redelivered := 0, 0
	for deliveries < d.cfg.Loop {
		m, err := d.next(msgs)
		if err != nil {
			return err
		}
		deliveries++
		if m.Redelivered {
			redelivered++
		}
		if deliveries == d.cfg.Loop {
			// Enough: stop consuming before the last requeue, or the
			// broker would hand the message straight back.
			if err := cancel(); err != nil {
				return err
			}
		}
		if err := m.Nack(false, true); err != nil { // requeue=true
			return err
		}
	}
	deadLettered, err := d.depth(dlq)
	if err != nil {
		return err
	}
	queued, err := d.depth(workQueue)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "=== basicNack(requeue=true) loop, %d deliveries ===\n", deliveries)
	fmt.Fprintf(d.out, "redelivered %d times\n", redelivered)
	fmt.Fprintf(d.out, "dead-lettered %d\n", deadLettered)
	fmt.Fprintf(d.out, "still on queue %d\n", queued)
	return nil
}

// Step 5: x-delivery-limit ends the poison loop of step 4. Once the message
// has failed more than the limit, the broker dead-letters it with reason
// "delivery_limit" (a queue without a dead-letter exchange drops it).
//
// Which returns count: on a classic queue, every one. basic.nack and
// basic.reject with requeue=true, basic.recover, and a consumer's channel
// or connection closing with the message unacked each bump the counter that
// redeliveries show as x-delivery-count. So the very loop of step 4, the
// seed's basicNack(tag, false, true), ends here. (Quorum queues follow
// RabbitMQ 4.3 instead, where basic.nack(requeue=true) and basic.recover
// do not count, only failures do: on a quorum queue this handler would
// need basicReject(tag, true) to be stopped by the limit.)
//
// RabbitMQ accepts x-delivery-limit only on quorum queues (x-queue-type
// quorum) and refuses it on a classic queue with 406 PRECONDITION_FAILED;
// Warren offers it on classic queues too. When the broker refuses it, this
// step says so and is skipped.
func (d *demo) deliveryLimit() error {
	args := deadLettering()
	args["x-delivery-limit"] = int64(d.cfg.DeliveryLimit)
	err := d.queue(limitedQueue, args)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
		fmt.Fprintf(d.out, "=== x-delivery-limit %d on a classic queue ===\n", d.cfg.DeliveryLimit)
		fmt.Fprintf(d.out, "note: this broker refused x-delivery-limit on classic queue %s:\n", limitedQueue)
		fmt.Fprintf(d.out, "note:   %s\n", amqpErr.Reason)
		fmt.Fprintln(d.out, "note: RabbitMQ supports it on quorum queues only (x-queue-type=quorum); Warren on every queue. Step skipped.")
		return d.reopen()
	}
	if err != nil {
		return err
	}
	if err := d.publish("", limitedQueue, order("poison"), amqp.Publishing{}); err != nil {
		return err
	}
	deliveries := 0
	var lastCount any
	// The loop ends when the broker stops redelivering: the message has
	// been dead-lettered and shows up on orders.dlq.
	dead, err := d.consumeUntil(limitedQueue, dlq, func(m amqp.Delivery) error {
		deliveries++
		lastCount = m.Headers["x-delivery-count"]
		return m.Nack(false, true) // the seed's basicNack(tag, false, true)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "=== x-delivery-limit %d, basicNack(requeue=true) loop ===\n", d.cfg.DeliveryLimit)
	fmt.Fprintf(d.out, "deliveries %d\n", deliveries)
	fmt.Fprintf(d.out, "x-delivery-count on the last delivery %v\n", lastCount)
	fmt.Fprintf(d.out, "dead-lettered to %s\n", dlq)
	d.printDeath("x-death after x-delivery-limit", dead)
	return nil
}

// Step 6: the redelivered flag as a one-retry budget. The first delivery is
// requeued (maybe the failure was transient); a redelivery is rejected to
// the DLQ. redelivered=true only means "maybe seen before" (a consumer that
// crashed also causes it), which is exactly what this policy needs.
func (d *demo) retryOnce() error {
	if err := d.queue(workQueue, deadLettering()); err != nil {
		return err
	}
	if err := d.publish("", workQueue, order("m-6"), amqp.Publishing{}); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "=== one retry on the redelivered flag ===")
	msgs, cancel, err := d.consumer(workQueue)
	if err != nil {
		return err
	}
	defer cancel()
	for n := 1; ; n++ {
		m, err := d.next(msgs)
		if err != nil {
			return err
		}
		retried := m.Redelivered
		fmt.Fprintf(d.out, "delivery %d redelivered=%t: basicNack(requeue=%t)\n", n, retried, !retried)
		if err := m.Nack(false, !retried); err != nil { // one requeue, then dead-letter
			return err
		}
		if retried {
			break
		}
	}
	dead, err := d.get(dlq)
	if err != nil {
		return err
	}
	d.printDeath("x-death after one retry", dead)
	return nil
}

// Step 7: a delay queue turns "expire after TTL" into "retry after TTL".
//
//	orders --order.created--> orders.retry   (DLX orders.retry.dlx, DLRK delay)
//	orders.retry.dlx --delay--> orders.delay (x-message-ttl, DLX orders, DLRK order.created)
//
// The consumer of orders.retry rejects; the message waits in orders.delay
// (which nobody consumes) until its TTL, then is dead-lettered back to the
// work exchange and delivered again. The x-dead-letter-routing-key of
// orders.delay is needed: dead-lettering replaced the routing key with
// "delay", which the work exchange does not route.
func (d *demo) delayQueue() error {
	if err := d.exchange(workExchange); err != nil {
		return err
	}
	if err := d.exchange(retryDLX); err != nil {
		return err
	}
	err := d.queue(retryQueue, amqp.Table{
		"x-dead-letter-exchange":    retryDLX,
		"x-dead-letter-routing-key": delayKey,
	})
	if err != nil {
		return err
	}
	err = d.queue(delayQueue, amqp.Table{
		"x-message-ttl":             d.cfg.TTL.Milliseconds(),
		"x-dead-letter-exchange":    workExchange,
		"x-dead-letter-routing-key": retryKey,
	})
	if err != nil {
		return err
	}
	if err := d.ch.QueueBind(retryQueue, retryKey, workExchange, false, nil); err != nil {
		return err
	}
	if err := d.ch.QueueBind(delayQueue, delayKey, retryDLX, false, nil); err != nil {
		return err
	}

	fmt.Fprintf(d.out, "=== retry through the delay queue %s (x-message-ttl %v) ===\n", delayQueue, d.cfg.TTL)
	if err := d.publish(workExchange, retryKey, order("m-7"), amqp.Publishing{}); err != nil {
		return err
	}
	first, err := d.get(retryQueue)
	if err != nil {
		return err
	}
	rejectedAt := time.Now()
	if err := first.Reject(false); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "attempt 1 failed: basicReject(requeue=false) -> %s -> %s\n", retryDLX, delayQueue)
	again, err := d.get(retryQueue)
	if err != nil {
		return err
	}
	waited := time.Since(rejectedAt)
	if err := again.Ack(false); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "attempt 2 after %v (>= ttl: %t), routing key %s: succeeded, acked\n",
		waited.Round(10*time.Millisecond), waited >= d.cfg.TTL, again.RoutingKey)
	d.printDeath("x-death of the retried message", again)
	return nil
}

// printDeath prints the x-death header of m in the format of the seed
// chapter: one block per entry, most recent first.
func (d *demo) printDeath(title string, m amqp.Delivery) {
	fmt.Fprintf(d.out, "=== %s ===\n", title)
	deaths, _ := m.Headers["x-death"].([]any)
	if len(deaths) == 0 {
		fmt.Fprintln(d.out, "no x-death header")
		return
	}
	for i, e := range deaths {
		t, _ := e.(amqp.Table)
		if len(deaths) > 1 {
			fmt.Fprintf(d.out, "--- x-death[%d] ---\n", i)
		}
		line := func(k string, v any) {
			fmt.Fprintln(d.out, strings.TrimRight(fmt.Sprintf("%s %v", k, v), " "))
		}
		line("reason", t["reason"])
		line("count", t["count"])
		line("exchange", t["exchange"])
		if tm, ok := t["time"].(time.Time); ok {
			// The seed was printed by Java's Date.toString.
			line("time", tm.Local().Format("Mon Jan 02 15:04:05 MST 2006"))
		}
		line("routing-keys", t["routing-keys"])
		line("queue", t["queue"])
		if exp, ok := t["original-expiration"]; ok {
			line("original-expiration", exp)
		}
	}
}

// order is a message body like the seed's.
func order(id string) []byte {
	return fmt.Appendf(nil, `{"orderId":%q,"detail":"detail for %s"}`, id, id)
}

// ---- small AMQP helpers ----

// reopen replaces the channel, which the broker closes on any channel error.
func (d *demo) reopen() error {
	if d.ch != nil {
		d.ch.Close()
	}
	ch, err := d.conn.Channel()
	if err != nil {
		return err
	}
	// Publisher confirms: publish returns once the broker has the message,
	// so each step starts from a known state.
	if err := ch.Confirm(false); err != nil {
		return err
	}
	d.ch = ch
	return nil
}

// queue deletes name (left over from an earlier run, maybe with other
// arguments) and declares it afresh, non-durable.
func (d *demo) queue(name string, args amqp.Table) error {
	if _, err := d.ch.QueueDelete(name, false, false, false); err != nil {
		return err
	}
	_, err := d.ch.QueueDeclare(name, false, false, false, false, args)
	return err
}

// exchange deletes and declares a direct exchange.
func (d *demo) exchange(name string) error {
	if err := d.ch.ExchangeDelete(name, false, false); err != nil {
		return err
	}
	return d.ch.ExchangeDeclare(name, amqp.ExchangeDirect, false, false, false, false, nil)
}

// publish publishes body and waits for the broker's confirm.
func (d *demo) publish(exchange, key string, body []byte, p amqp.Publishing) error {
	p.ContentType = "application/json"
	p.Body = body
	c, err := d.ch.PublishWithDeferredConfirmWithContext(d.ctx, exchange, key, false, false, p)
	if err != nil {
		return err
	}
	ok, err := c.WaitContext(d.ctx)
	if err == nil && !ok {
		err = fmt.Errorf("publish to %q/%q nacked by the broker", exchange, key)
	}
	return err
}

// get waits for one message on queue (basic.get, polling) and returns it
// unacknowledged; messages read from orders.dlq are acknowledged at once.
func (d *demo) get(queue string) (amqp.Delivery, error) {
	deadline := time.Now().Add(d.cfg.Timeout)
	for {
		m, ok, err := d.ch.Get(queue, queue == dlq)
		if err != nil || ok {
			return m, err
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("no message on %s within %v", queue, d.cfg.Timeout)
		}
		select {
		case <-d.ctx.Done():
			return m, d.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// drain takes every ready message of queue and returns their order ids.
func (d *demo) drain(queue string) ([]string, error) {
	var ids []string
	for {
		m, ok, err := d.ch.Get(queue, true)
		if err != nil || !ok {
			return ids, err
		}
		var id string
		if _, after, found := strings.Cut(string(m.Body), `"orderId":"`); found {
			id, _, _ = strings.Cut(after, `"`)
		}
		ids = append(ids, id)
	}
}

// depth is the number of ready messages in queue.
func (d *demo) depth(queue string) (int, error) {
	q, err := d.ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	return q.Messages, err
}

// consumer starts a consumer on queue with manual acknowledgements and
// prefetch 1, and returns its deliveries and a function that cancels it.
func (d *demo) consumer(queue string) (<-chan amqp.Delivery, func() error, error) {
	if err := d.ch.Qos(1, 0, false); err != nil {
		return nil, nil, err
	}
	tag := "orders-dlq-" + queue
	msgs, err := d.ch.Consume(queue, tag, false, false, false, false, nil)
	cancel := func() error { return d.ch.Cancel(tag, false) }
	return msgs, cancel, err
}

// next waits for the next delivery.
func (d *demo) next(msgs <-chan amqp.Delivery) (amqp.Delivery, error) {
	select {
	case <-d.ctx.Done():
		return amqp.Delivery{}, d.ctx.Err()
	case <-time.After(d.cfg.Timeout):
		return amqp.Delivery{}, fmt.Errorf("no delivery within %v", d.cfg.Timeout)
	case m, ok := <-msgs:
		if !ok {
			return m, errors.New("consumer closed")
		}
		return m, nil
	}
}

// consumeUntil runs handle for each delivery of queue until a message
// appears on stop, and returns that message.
func (d *demo) consumeUntil(queue, stop string, handle func(amqp.Delivery) error) (amqp.Delivery, error) {
	msgs, cancel, err := d.consumer(queue)
	if err != nil {
		return amqp.Delivery{}, err
	}
	defer cancel()
	deadline := time.After(d.cfg.Timeout)
	for {
		select {
		case <-d.ctx.Done():
			return amqp.Delivery{}, d.ctx.Err()
		case <-deadline:
			return amqp.Delivery{}, fmt.Errorf("nothing reached %s within %v", stop, d.cfg.Timeout)
		case m := <-msgs:
			if err := handle(m); err != nil {
				return amqp.Delivery{}, err
			}
		case <-time.After(10 * time.Millisecond):
			// Quiet: has the broker dead-lettered it?
			m, ok, err := d.ch.Get(stop, true)
			if err != nil || ok {
				return m, err
			}
		}
	}
}

// cleanup deletes everything the steps declared, on a fresh channel (the
// shared one may have been closed by an error).
func (d *demo) cleanup() {
	ch, err := d.conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, q := range []string{workQueue, ttlQueue, boundedQueue, limitedQueue, dlq, retryQueue, delayQueue} {
		ch.QueueDelete(q, false, false, false)
	}
	for _, x := range []string{dlx, workExchange, retryDLX} {
		ch.ExchangeDelete(x, false, false)
	}
}
