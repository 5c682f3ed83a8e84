package integration

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/amqp"
)

// shortstrFields lists, from the generated spec, every method without
// content and each of its shortstr fields.
func shortstrFields(t *testing.T) (out []struct {
	m     amqp.Method
	field string
}) {
	t.Helper()
	src, err := os.ReadFile("../amqp/spec.go")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]amqp.Method{}
	for c := uint16(10); c <= 90; c += 10 {
		for id := uint16(0); id < 200; id++ {
			if m := amqp.NewMethod(c, id); m != nil {
				types[reflect.TypeOf(m).Elem().Name()] = m
			}
		}
	}
	re := regexp.MustCompile(`(?m)^type (\w+) struct \{\n((?:\t.*\n)*?)\}`)
	fre := regexp.MustCompile(`(?m)^\t(\w+)\s+string\s+// \S+ shortstr`)
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		meth := types[m[1]]
		if meth == nil || meth.HasContent() {
			continue
		}
		for _, f := range fre.FindAllStringSubmatch(m[2], -1) {
			out = append(out, struct {
				m     amqp.Method
				field string
			}{meth, f[1]})
		}
	}
	if len(out) < 25 {
		t.Fatalf("found only %d shortstr fields in ../amqp/spec.go", len(out))
	}
	return out
}

// TestShortstrUTF8 is issue 11 item 3: RabbitMQ 3.10 refuses every
// shortstr of a method without content that is not UTF-8 (queue and
// exchange names, routing keys, consumer tags, vhost, ...) with 501
// "FRAME_ERROR - Malformed UTF-8 in shortstr"; Warren took such names
// and lost them at the next restart. Each field of each such method, sent
// with "bad\xff", gets the same answer from both; so does a connection.open
// with such a vhost (naming 10.40), while basic.publish's exchange and
// routing key are not checked, and names RabbitMQ's looser UTF-8 reading
// accepts (surrogates, code points above U+10FFFF) are accepted by both.
func TestShortstrUTF8(t *testing.T) {
	warren := newWarrenTarget(t)
	targets := []*target{warren}
	if u := rabbitURL(t); u != "" {
		targets = append(targets, newRabbitTarget(t, u))
	}
	results := map[string]map[string]string{}
	for _, tg := range targets {
		res := map[string]string{}
		results[tg.kind] = res
		open := func() *rawConn {
			c := rawDial(t, tg.addr)
			must(t, c.handshake(0, 0))
			must(t, c.openChannel(1))
			return c
		}
		for _, f := range shortstrFields(t) {
			m := amqp.NewMethod(f.m.ClassID(), f.m.MethodID())
			reflect.ValueOf(m).Elem().FieldByName(f.field).SetString("hD-bad\xff")
			c := open()
			must(t, c.sendMethod(1, m))
			res[m.Name()+"."+f.field] = c.awaitClose().String()
		}
		// basic.publish is not checked: basic.qos after it is answered.
		for _, p := range []*amqp.BasicPublish{{Exchange: "hD-bad\xff"}, {RoutingKey: "hD-bad\xff"}} {
			c := open()
			b := amqp.AppendMethodFrame(nil, 1, p)
			b = amqp.AppendHeaderFrame(b, 1, 60, 0, &amqp.Properties{})
			b = amqp.AppendMethodFrame(b, 1, &amqp.BasicQos{PrefetchCount: 1})
			must(t, c.write(b))
			var got []string
			for len(got) < 3 {
				_, m, err := c.readMethod()
				if err != nil {
					got = append(got, err.Error())
					break
				}
				cc, ok := m.(*amqp.ChannelClose)
				if !ok {
					got = append(got, m.Name())
					break
				}
				// The reply text names the exchange as published, not
				// UTF-8 either; the basic.qos after it was dropped on the
				// closing channel, so nothing more comes.
				got = append(got, fmt.Sprintf("channel.close %d %q", cc.ReplyCode, cc.ReplyText))
				must(t, c.sendMethod(1, &amqp.ChannelCloseOk{}))
				break
			}
			res["extra: basic.publish "+p.Exchange+"/"+p.RoutingKey] = fmtList(got)
		}
		c := rawDial(t, tg.addr)
		err := c.handshakeWith(rawLogin{user: "guest", pass: "guest", vhost: "hD-bad\xff"})
		if u, ok := err.(*unexpectedMethod); ok {
			if cc, ok := u.m.(*amqp.ConnectionClose); ok {
				res["extra: connection.open vhost"] = closeResult{Level: "connection", Code: cc.ReplyCode, Text: cc.ReplyText, Class: cc.FailingClassID, Method: cc.FailingMethodID}.String()
			}
		} else {
			res["extra: connection.open vhost"] = "error " + errString(err)
		}
		for _, s := range []string{"\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf7\xbf\xbf\xbf", "\ufffe", "nul\x00", "\xe0\x80\xaf", "\xf8\x88\x80\x80\x80", "\xc0\xaf"} {
			c := open()
			name := "hD-u8-" + randomSuffix() + s
			must(t, c.sendMethod(1, &amqp.QueueDeclare{Queue: name, Exclusive: true}))
			_, m, err := c.readMethod()
			switch {
			case err != nil:
				res["extra: queue.declare "+s] = err.Error()
			case m.Name() == "queue.declare-ok":
				res["extra: queue.declare "+s] = "ok, same name: " + fmtBool(m.(*amqp.QueueDeclareOk).Queue == name)
			case m.Name() == "connection.close":
				cc := m.(*amqp.ConnectionClose)
				res["extra: queue.declare "+s] = closeResult{Level: "connection", Code: cc.ReplyCode, Text: cc.ReplyText, Class: cc.FailingClassID, Method: cc.FailingMethodID}.String()
			default:
				res["extra: queue.declare "+s] = m.Name()
			}
		}
	}
	w := results["warren"]
	for k, v := range w {
		if want := `connection.close 501 "FRAME_ERROR - Malformed UTF-8 in shortstr" (0.0)`; !strings.HasPrefix(k, "extra: ") && v != want {
			t.Errorf("[warren] %s: got %s, want %s", k, v, want)
		}
	}
	if w["extra: connection.open vhost"] != `connection.close 501 "FRAME_ERROR - Malformed UTF-8 in shortstr" (10.40)` {
		t.Errorf("[warren] connection.open with a malformed vhost: %s", w["extra: connection.open vhost"])
	}
	r, ok := results["rabbitmq"]
	if !ok {
		return
	}
	for k, v := range w {
		if r[k] != v {
			t.Errorf("%s: warren %s, rabbitmq %s", k, v, r[k])
		}
	}
	for k, v := range r {
		if _, ok := w[k]; !ok {
			t.Errorf("%s: rabbitmq %s, warren nothing", k, v)
		}
	}
}

func fmtList(s []string) string {
	out := ""
	for i, e := range s {
		if i > 0 {
			out += ", "
		}
		out += e
	}
	return out
}

func fmtBool(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestNonUTF8NamesSurviveRestart is issue 11 item 3: durable queues
// "bad\xff" and "bad\xfe" (created over HTTP, which RabbitMQ accepts too)
// and "sur\xed\xa0\x80" and "sur\xed\xa0\x81" (surrogates, which RabbitMQ's
// AMQP check lets through and Go's JSON turns into U+FFFD) came back after a
// restart merged into one queue each pair, one queue's confirmed messages
// gone and the original names 404. Each must come back with its own
// messages.
func TestNonUTF8NamesSurviveRestart(t *testing.T) {
	if u := rabbitURL(t); u != "" {
		// What RabbitMQ does with such names over HTTP: accepts them.
		rb := newMgmtRabbit(t)
		for _, n := range []string{"hD-bad\xff-" + randomSuffix(), "hD-bad\xfe-" + randomSuffix()} {
			rb.must("PUT", "/api/queues/%2F/"+esc(n), map[string]any{"durable": true}, 201, 204)
			rb.must("DELETE", "/api/queues/%2F/"+esc(n), nil, 204)
		}
	}
	tg := newMgmtWarren(t)
	httpNames := []string{"hD-bad\xff", "hD-bad\xfe"}
	amqpNames := []string{"hD-sur\xed\xa0\x80", "hD-sur\xed\xa0\x81"}
	for _, n := range httpNames {
		tg.must("PUT", "/api/queues/%2F/"+esc(n), map[string]any{"durable": true}, 201, 204)
	}
	c := tg.dial(t, "/", "hD-utf8")
	ch := openChannel(t, c)
	for _, n := range amqpNames {
		if _, err := ch.QueueDeclare(n, true, false, false, false, nil); err != nil {
			t.Fatalf("declare %q: %v", n, err)
		}
	}
	must(t, ch.Confirm(false))
	all := append(append([]string{}, httpNames...), amqpNames...)
	for i, n := range all {
		for j := 0; j <= i; j++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", n, true, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(n)})
			must(t, err)
			if ok, err := conf.WaitContext(ctx); !ok || err != nil {
				t.Fatalf("publish to %q: not confirmed (%v %v)", n, ok, err)
			}
			cancel()
		}
	}
	tg.w.Restart()
	for i, n := range all {
		r := tg.do("GET", "/api/queues/%2F/"+esc(n), nil)
		if r.status != 200 {
			t.Errorf("after a restart GET queue %q: %s", n, r)
			continue
		}
		// Each message's body is its queue's name: get them all.
		g := tg.do("POST", "/api/queues/%2F/"+esc(n)+"/get", map[string]any{"count": 10, "ackmode": "ack_requeue_true", "encoding": "base64"})
		msgs, _ := g.json(t).([]any)
		if len(msgs) != i+1 {
			t.Errorf("after a restart queue %q holds %d messages, want %d: %s", n, len(msgs), i+1, g)
		}
	}
	for _, n := range amqpNames {
		q, err := openChannel(t, tg.dial(t, "/", "hD-utf8-2")).QueueDeclarePassive(n, true, false, false, false, nil)
		if err != nil || q.Name != n {
			t.Errorf("after a restart passive declare %q: %v %q", n, err, q.Name)
		}
	}
}
