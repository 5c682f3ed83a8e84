// Command sms-retry is a notification sender whose SMS gateway fails, with
// delayed retries built from TTL queues and dead-lettering, and a final
// dead-letter queue whose consumer raises an alert and records the message
// in SQLite for a human to follow up. Run it against a running broker
// (Warren or RabbitMQ):
//
//	go run ./examples/sms-retry --url amqp://guest:guest@localhost:5672/
//	go run ./examples/sms-retry --delay1 100ms --delay2 300ms   # the same in a second
//
// # Topology
//
// It is the one of the field report this example is taken from (a Java
// service sending welcome SMS), with neutral names for the retry queues,
// whose delays are flags:
//
//	sms.normal.exchange --sms.send--> sms.normal.queue
//	    x-dead-letter-exchange=sms.dlx.exchange, x-dead-letter-routing-key=sms.dead
//	sms.retry.exchange --sms.retry.1--> sms.retry.1.queue   x-message-ttl=--delay1 (5s)
//	                   --sms.retry.2--> sms.retry.2.queue   x-message-ttl=--delay2 (30s)
//	    both: x-dead-letter-exchange=sms.normal.exchange, x-dead-letter-routing-key=sms.send
//	sms.dlx.exchange --sms.dead--> sms.dlx.queue             (final DLQ, no DLX of its own)
//
// # What happens
//
// The sender consumes sms.normal.queue and calls the gateway. On success it
// acks. On failure it republishes the message to a retry queue with the
// header x-retry-count incremented, waits for the broker's confirm, and acks
// the original: the first retry goes to sms.retry.1.queue, later ones to
// sms.retry.2.queue. Nobody consumes the retry queues; when the TTL expires
// the broker dead-letters the message back to sms.normal.exchange with
// routing key sms.send, and the sender sees it again. Once x-retry-count
// has reached --max-retries (2) and the gateway still fails, the sender
// nacks with requeue=false, and the broker dead-letters it through
// sms.dlx.exchange into sms.dlx.queue. So a number that always fails is
// tried 3 times (at once, after 5 s, after 30 more seconds) and reaches the
// DLQ after its third failure, with x-retry-count 2. (The field report
// retries three times; --max-retries 3 gives that.) The DLQ consumer prints an alert and inserts a row
// into the dead_letters table of the SQLite file --db; the insert is
// idempotent on the message id, so a redelivery does not record it twice.
//
// # Why a header of our own
//
// The retry count lives in x-retry-count, a header the application owns,
// not in the broker's x-death: x-death is written by the broker when it
// dead-letters, and since RabbitMQ 3.13/4.0 (and in Warren) an x-death
// header set by a client on publish is ignored and replaced (spec R3.7).
// Here every retry is a fresh publish, so x-death only ever tells the last
// leg of the journey (expired from a retry queue, or rejected from
// sms.normal.queue); the republished message deliberately starts with
// fresh headers and does not copy it.
//
// # Retry queues must hold one delay each
//
// Queue TTL is used, not per-message expiration: a message whose own TTL
// has passed waits behind the head of the queue on RabbitMQ (R2.4), so one
// queue per delay keeps the retries on time on every broker.
//
// Every queue and exchange is deleted before it is declared and again at the
// end, so the program can run repeatedly against the same broker with other
// delays. Do not run it where these names are in real use.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	_ "modernc.org/sqlite" // pure-Go SQLite driver, registered as "sqlite"
)

// Names of the topology.
const (
	normalExchange = "sms.normal.exchange"
	retryExchange  = "sms.retry.exchange"
	dlxExchange    = "sms.dlx.exchange"

	normalQueue = "sms.normal.queue"
	retryQueue1 = "sms.retry.1.queue"
	retryQueue2 = "sms.retry.2.queue"
	dlxQueue    = "sms.dlx.queue"

	sendKey   = "sms.send"
	retryKey1 = "sms.retry.1"
	retryKey2 = "sms.retry.2"
	deadKey   = "sms.dead"

	// retryCountHeader is the application's own retry counter.
	retryCountHeader = "x-retry-count"
)

type config struct {
	URL        string
	Delay1     time.Duration // TTL of sms.retry.1.queue: wait before the first retry
	Delay2     time.Duration // TTL of sms.retry.2.queue: wait before each later retry
	MaxRetries int           // retries before the final DLQ
	Phones     []string      // numbers to send a welcome SMS to
	Failing    []string      // numbers the fake gateway always fails for
	DB         string        // SQLite file of the dead letters
	Timeout    time.Duration // give up if the messages are not all settled by then
}

func main() {
	var cfg config
	var phones, failing string
	flag.StringVar(&cfg.URL, "url", "amqp://guest:guest@localhost:5672/", "broker URL")
	flag.DurationVar(&cfg.Delay1, "delay1", 5*time.Second, "delay before the first retry (TTL of sms.retry.1.queue)")
	flag.DurationVar(&cfg.Delay2, "delay2", 30*time.Second, "delay before each later retry (TTL of sms.retry.2.queue)")
	flag.IntVar(&cfg.MaxRetries, "max-retries", 2, "retries before a message goes to the final DLQ")
	flag.StringVar(&phones, "phones", "13800000001,13800000002", "comma-separated numbers to send a welcome SMS to")
	flag.StringVar(&failing, "fail", "13800000002", "comma-separated numbers the fake gateway fails for")
	flag.StringVar(&cfg.DB, "db", "sms-dead-letters.db", "SQLite file recording the dead letters")
	flag.DurationVar(&cfg.Timeout, "timeout", 0, "give up after this long (default: the retry delays plus 10s)")
	flag.Parse()
	cfg.Phones = splitList(phones)
	cfg.Failing = splitList(failing)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// smsMessage is the message body, as in the field report.
type smsMessage struct {
	Mobile  string `json:"mobile"`
	Content string `json:"content"`
	MsgID   string `json:"msgId"`
}

// gateway sends one SMS.
type gateway func(mobile, content string) error

// fakeGateway fails for the given numbers, as a provider outage for some
// carrier would, and succeeds for the others.
func fakeGateway(failing []string) gateway {
	return func(mobile, content string) error {
		for _, f := range failing {
			if f == mobile {
				return errors.New("gateway: 503 upstream carrier unavailable")
			}
		}
		return nil
	}
}

// outcome is what finally happened to one message.
type outcome struct {
	msgID string
	dead  bool
}

// printer serialises the lines of the consumers and stamps them with the
// time since the start, so the retry delays are visible.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "[%6.2fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// restart sets the time the stamps count from.
func (p *printer) restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start = time.Now()
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.MaxRetries < 1 {
		return fmt.Errorf("max-retries must be at least 1")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = cfg.Delay1 + time.Duration(cfg.MaxRetries)*cfg.Delay2 + 10*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	p := &printer{out: out, start: time.Now()}

	db, err := openDB(cfg.DB)
	if err != nil {
		return err
	}
	defer db.Close()

	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := declare(conn, cfg); err != nil {
		return err
	}
	defer cleanup(conn)

	// One channel per role: the sender consumes and republishes retries,
	// the alerter consumes the DLQ, the service publishes new SMS. The
	// consumers report each final outcome until stop is called.
	outcomes := make(chan outcome)
	stopped := make(chan struct{})
	report := func(o outcome) {
		select {
		case outcomes <- o:
		case <-stopped:
		}
	}
	var wg sync.WaitGroup
	var consumers []*amqp.Channel
	stop := sync.OnceFunc(func() {
		close(stopped)
		for _, ch := range consumers {
			ch.Close() // ends the consumer's delivery loop
		}
		wg.Wait()
	})
	defer stop()
	sender, err := startSender(conn, cfg, fakeGateway(cfg.Failing), p, report, &wg)
	if err != nil {
		return err
	}
	consumers = append(consumers, sender)
	alerter, err := startAlerter(conn, db, p, report, &wg)
	if err != nil {
		return err
	}
	consumers = append(consumers, alerter)

	service, err := conn.Channel()
	if err != nil {
		return err
	}
	defer service.Close()
	if err := service.Confirm(false); err != nil {
		return err
	}
	p.restart() // the timestamps count from the first publish
	runID := fmt.Sprintf("%x", time.Now().UnixNano())
	var ids []string
	for i, mobile := range cfg.Phones {
		sms := smsMessage{Mobile: mobile, Content: "Welcome to Warren!", MsgID: fmt.Sprintf("sms-%s-%d", runID, i+1)}
		p.printf("publish %s: welcome SMS to %s", sms.MsgID, mobile)
		if err := sendSMS(ctx, service, sms); err != nil {
			return err
		}
		ids = append(ids, sms.MsgID)
	}

	// Wait until every message is sent or recorded as a dead letter.
	sent, dead := 0, 0
	for sent+dead < len(ids) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %d sent, %d dead-lettered, %d still in flight: %w",
				time.Since(p.start).Round(time.Millisecond), sent, dead, len(ids)-sent-dead, ctx.Err())
		case o := <-outcomes:
			if o.dead {
				dead++
			} else {
				sent++
			}
		}
	}
	stop() // the consumers are done before the database is read

	p.printf("done: %d sent, %d dead-lettered", sent, dead)
	return printDeadLetters(db, cfg.DB, ids, p)
}

// sendSMS is the service entry point: publish a new SMS with retry count 0.
func sendSMS(ctx context.Context, ch *amqp.Channel, sms smsMessage) error {
	body, err := json.Marshal(sms)
	if err != nil {
		return err
	}
	return publish(ctx, ch, normalExchange, sendKey, amqp.Publishing{
		MessageId:    sms.MsgID,
		DeliveryMode: amqp.Persistent,
		ContentType:  "application/json",
		Headers:      amqp.Table{retryCountHeader: int32(0)},
		Body:         body,
	})
}

// startSender consumes sms.normal.queue: it calls the gateway and, on
// failure, schedules a retry or gives the message up to the DLQ.
func startSender(conn *amqp.Connection, cfg config, gw gateway, p *printer, report func(outcome), wg *sync.WaitGroup) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	// Retries are published on the same channel, with confirms: the
	// original is acked only once the broker holds the retry, so a crash in
	// between duplicates an SMS attempt rather than losing it.
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	if err := ch.Qos(10, 0, false); err != nil {
		return nil, err
	}
	msgs, err := ch.Consume(normalQueue, "sms-sender", false, false, false, false, nil)
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range msgs {
			if err := handleSMS(ch, cfg, gw, p, report, m); err != nil {
				p.printf("sender: %v", err)
				return
			}
		}
	}()
	return ch, nil
}

func handleSMS(ch *amqp.Channel, cfg config, gw gateway, p *printer, report func(outcome), m amqp.Delivery) error {
	var sms smsMessage
	if err := json.Unmarshal(m.Body, &sms); err != nil {
		// A malformed message will never succeed: straight to the DLQ.
		p.printf("malformed message %s: %v: basicNack(requeue=false)", m.MessageId, err)
		return m.Nack(false, false)
	}
	retries := headerInt(m.Headers[retryCountHeader])
	attempt := fmt.Sprintf("attempt %d to %s (%s %d)", retries+1, sms.Mobile, retryCountHeader, retries)
	if from := lastDeathQueue(m.Headers); from != "" {
		attempt += ", back from " + from
	}

	err := gw(sms.Mobile, sms.Content)
	if err == nil {
		p.printf("%s: sent", attempt)
		report(outcome{msgID: sms.MsgID})
		return m.Ack(false)
	}
	if retries >= cfg.MaxRetries {
		p.printf("%s: %v; retries exhausted: basicNack(requeue=false) -> %s", attempt, err, dlxExchange)
		return m.Nack(false, false) // the queue's DLX takes it to sms.dlx.queue
	}

	// Schedule the retry: a fresh publish into the retry queue, with our
	// counter bumped. Fresh headers: the broker's x-death is not copied
	// (a client-set x-death is ignored by the broker anyway, R3.7).
	key, queue, delay := retryKey2, retryQueue2, cfg.Delay2
	if retries == 0 {
		key, queue, delay = retryKey1, retryQueue1, cfg.Delay1
	}
	retry := amqp.Publishing{
		MessageId:    m.MessageId,
		DeliveryMode: amqp.Persistent,
		ContentType:  m.ContentType,
		Headers:      amqp.Table{retryCountHeader: int32(retries + 1)},
		Body:         m.Body,
	}
	if err := publish(context.Background(), ch, retryExchange, key, retry); err != nil {
		return err
	}
	p.printf("%s: %v; retry %d in %v via %s", attempt, err, retries+1, delay, queue)
	return m.Ack(false)
}

// startAlerter consumes the final DLQ: it raises an alert and records the
// message for a human.
func startAlerter(conn *amqp.Connection, db *sql.DB, p *printer, report func(outcome), wg *sync.WaitGroup) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	msgs, err := ch.Consume(dlxQueue, "sms-alerter", false, false, false, false, nil)
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range msgs {
			var sms smsMessage
			_ = json.Unmarshal(m.Body, &sms) // a malformed one is still recorded
			if sms.MsgID == "" {
				sms.MsgID = m.MessageId
			}
			retries := headerInt(m.Headers[retryCountHeader])
			// The broker's own x-death says why and from where it was
			// dead-lettered this last time.
			reason, queue := lastDeath(m.Headers)
			p.printf("ALERT SMS_DEAD_LETTER: SMS to %s failed after %d retries (msgId %s, x-death reason %s from %s)",
				sms.Mobile, retries, sms.MsgID, reason, queue)
			if err := recordDeadLetter(db, sms, m.Body, retries, reason, queue); err != nil {
				p.printf("alerter: recording %s: %v", sms.MsgID, err)
				_ = m.Nack(false, true) // keep it for the next try
				return
			}
			p.printf("recorded %s in dead_letters for manual follow-up", sms.MsgID)
			report(outcome{msgID: sms.MsgID, dead: true})
			if err := m.Ack(false); err != nil {
				p.printf("alerter: %v", err)
				return
			}
		}
	}()
	return ch, nil
}

// ---- SQLite ----

func openDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, err
	}
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS dead_letters (
		msg_id       TEXT PRIMARY KEY,
		mobile       TEXT NOT NULL,
		retry_count  INTEGER NOT NULL,
		reason       TEXT NOT NULL,
		source_queue TEXT NOT NULL,
		body         TEXT NOT NULL,
		recorded_at  TEXT NOT NULL
	)`)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return db, nil
}

// recordDeadLetter inserts one row; a redelivered dead letter (same msgId)
// is recorded once.
func recordDeadLetter(db *sql.DB, sms smsMessage, body []byte, retries int, reason, queue string) error {
	_, err := db.Exec(`INSERT OR IGNORE INTO dead_letters
		(msg_id, mobile, retry_count, reason, source_queue, body, recorded_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		sms.MsgID, sms.Mobile, retries, reason, queue, string(body), time.Now().UTC().Format(time.RFC3339Nano))
	return err
}

func printDeadLetters(db *sql.DB, path string, ids []string, p *printer) error {
	rows, err := db.Query(`SELECT msg_id, mobile, retry_count, reason, source_queue
		FROM dead_letters WHERE msg_id IN (SELECT value FROM json_each(?)) ORDER BY msg_id`, jsonList(ids))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, mobile, reason, queue string
		var retries int
		if err := rows.Scan(&id, &mobile, &retries, &reason, &queue); err != nil {
			return err
		}
		p.printf("sqlite %s: dead_letters msg_id=%s mobile=%s retry_count=%d reason=%s source_queue=%s",
			path, id, mobile, retries, reason, queue)
	}
	return rows.Err()
}

// ---- AMQP helpers ----

// declare deletes what an earlier run may have left (perhaps with other
// delays, which a redeclare would refuse) and declares the topology.
func declare(conn *amqp.Connection, cfg config) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, x := range []string{normalExchange, retryExchange, dlxExchange} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return err
		}
		if err := ch.ExchangeDeclare(x, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return err
		}
	}
	queues := []struct {
		name, exchange, key string
		args                amqp.Table
	}{
		{normalQueue, normalExchange, sendKey, amqp.Table{
			"x-dead-letter-exchange":    dlxExchange,
			"x-dead-letter-routing-key": deadKey,
		}},
		{retryQueue1, retryExchange, retryKey1, amqp.Table{
			"x-message-ttl":             cfg.Delay1.Milliseconds(),
			"x-dead-letter-exchange":    normalExchange,
			"x-dead-letter-routing-key": sendKey,
		}},
		{retryQueue2, retryExchange, retryKey2, amqp.Table{
			"x-message-ttl":             cfg.Delay2.Milliseconds(),
			"x-dead-letter-exchange":    normalExchange,
			"x-dead-letter-routing-key": sendKey,
		}},
		{dlxQueue, dlxExchange, deadKey, nil},
	}
	for _, q := range queues {
		if _, err := ch.QueueDelete(q.name, false, false, false); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return err
		}
		if err := ch.QueueBind(q.name, q.key, q.exchange, false, nil); err != nil {
			return err
		}
	}
	return nil
}

func cleanup(conn *amqp.Connection) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, q := range []string{normalQueue, retryQueue1, retryQueue2, dlxQueue} {
		ch.QueueDelete(q, false, false, false)
	}
	for _, x := range []string{normalExchange, retryExchange, dlxExchange} {
		ch.ExchangeDelete(x, false, false)
	}
}

// publish publishes on a channel in confirm mode and waits for the confirm.
func publish(ctx context.Context, ch *amqp.Channel, exchange, key string, msg amqp.Publishing) error {
	c, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg)
	if err != nil {
		return err
	}
	ok, err := c.WaitContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("broker nacked the publish to %s/%s", exchange, key)
	}
	return err
}

// headerInt reads an integer header whatever AMQP integer type carried it.
func headerInt(v any) int {
	switch n := v.(type) {
	case int8:
		return int(n)
	case uint8:
		return int(n)
	case int16:
		return int(n)
	case uint16:
		return int(n)
	case int32:
		return int(n)
	case uint32:
		return int(n)
	case int64:
		return int(n)
	case int:
		return n
	}
	return 0
}

// lastDeath returns the reason and queue of the most recent x-death entry.
func lastDeath(h amqp.Table) (reason, queue string) {
	deaths, _ := h["x-death"].([]any)
	if len(deaths) == 0 {
		return "none", "nowhere"
	}
	t, _ := deaths[0].(amqp.Table)
	reason, _ = t["reason"].(string)
	queue, _ = t["queue"].(string)
	return reason, queue
}

// lastDeathQueue names the queue a message was last dead-lettered from, if
// any; for display only.
func lastDeathQueue(h amqp.Table) string {
	if _, ok := h["x-death"]; !ok {
		return ""
	}
	_, q := lastDeath(h)
	return q
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func jsonList(ids []string) string {
	b, _ := json.Marshal(ids)
	return string(b)
}
