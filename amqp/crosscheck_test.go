package amqp

import (
	"bytes"
	"context"
	"net"
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// fromClient converts amqp091-go table values to this package's types.
func fromClient(v any) any {
	switch v := v.(type) {
	case amqp091.Table:
		t := Table{}
		for k, x := range v {
			t[k] = fromClient(x)
		}
		return t
	case []any:
		a := []any{}
		for _, x := range v {
			a = append(a, fromClient(x))
		}
		return a
	case amqp091.Decimal:
		return Decimal{Scale: v.Scale, Value: v.Value}
	case time.Time:
		return v.UTC()
	}
	return v
}

// toClient converts this package's table values to amqp091-go types.
func toClient(v any) any {
	switch v := v.(type) {
	case Table:
		t := amqp091.Table{}
		for k, x := range v {
			t[k] = toClient(x)
		}
		return t
	case []any:
		a := []any{}
		for _, x := range v {
			a = append(a, toClient(x))
		}
		return a
	case Decimal:
		return amqp091.Decimal{Scale: v.Scale, Value: v.Value}
	}
	return v
}

// TestCrossCheckAMQP091 runs the amqp091-go client against a fake broker
// built on this package over a net.Pipe: every field type goes through
// tables in both directions (server properties, client properties,
// message headers), and publish/deliver content crosses frame-max.
func TestCrossCheckAMQP091(t *testing.T) {
	srv, cli := net.Pipe()
	defer srv.Close()
	serverProps := sampleTable()
	headers := sampleTable()
	body := bytes.Repeat([]byte("warren!"), 1500) // 10500 bytes > frame-max

	type published struct {
		m    *BasicPublish
		p    Properties
		body []byte
		cp   Table
	}
	got := make(chan published, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			fr := NewFrameReader(srv, 4096)
			if _, err := fr.ReadProtocolHeader(); err != nil {
				return err
			}
			send := func(ch uint16, m Method) {
				srv.Write(AppendMethodFrame(nil, ch, m))
			}
			read := func() (Frame, Method, error) {
				f, err := fr.ReadFrame()
				if err != nil || f.Type != FrameMethod {
					return f, nil, err
				}
				m, err := DecodeMethod(f.Payload)
				return f, m, err
			}
			var out published
			send(0, &ConnectionStart{VersionMajor: 0, VersionMinor: 9, ServerProperties: serverProps, Mechanisms: "PLAIN", Locales: "en_US"})
			_, m, err := read()
			if err != nil {
				return err
			}
			out.cp = m.(*ConnectionStartOk).ClientProperties
			send(0, &ConnectionTune{ChannelMax: 16, FrameMax: 4096, Heartbeat: 0})
			if _, _, err := read(); err != nil { // tune-ok
				return err
			}
			fr.SetMaxFrameSize(4096)
			if _, _, err := read(); err != nil { // open
				return err
			}
			send(0, &ConnectionOpenOk{})
			if _, _, err := read(); err != nil { // channel.open
				return err
			}
			send(1, &ChannelOpenOk{})
			// basic.publish + header + body frames
			_, m, err = read()
			if err != nil {
				return err
			}
			out.m = m.(*BasicPublish)
			f, err := fr.ReadFrame()
			if err != nil {
				return err
			}
			_, size, p, err := DecodeHeader(f.Payload)
			if err != nil {
				return err
			}
			out.p = p
			for uint64(len(out.body)) < size {
				f, err := fr.ReadFrame()
				if err != nil {
					return err
				}
				out.body = append(out.body, f.Payload...)
			}
			got <- out
			// basic.consume → consume-ok, then a delivery.
			_, m, err = read()
			if err != nil {
				return err
			}
			c := m.(*BasicConsume)
			send(1, &BasicConsumeOk{ConsumerTag: c.ConsumerTag})
			var b []byte
			b = AppendMethodFrame(b, 1, &BasicDeliver{ConsumerTag: c.ConsumerTag, DeliveryTag: 77, Redelivered: true, Exchange: "ex", RoutingKey: "rk"})
			b = AppendHeaderFrame(b, 1, ClassBasic, uint64(len(body)), &out.p)
			b = AppendBodyFrames(b, 1, body, 4096)
			srv.Write(b)
			// connection.close → close-ok
			for {
				_, m, err := read()
				if err != nil {
					return err
				}
				if _, ok := m.(*ConnectionClose); ok {
					send(0, &ConnectionCloseOk{})
					return nil
				}
			}
		}()
	}()

	cfg := amqp091.Config{
		SASL:       []amqp091.Authentication{&amqp091.PlainAuth{Username: "guest", Password: "guest"}},
		Vhost:      "/",
		Properties: toClient(Table{"x-all": sampleTable()}).(amqp091.Table),
	}
	conn, err := amqp091.Open(cli, cfg)
	if err != nil {
		t.Fatalf("open: %v (server: %v)", err, <-errc)
	}
	if s := fromClient(conn.Properties); !reflect.DeepEqual(s, serverProps) {
		t.Errorf("server properties as amqp091-go decoded them:\n%#v\nwant\n%#v", s, serverProps)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	pub := amqp091.Publishing{
		Headers: toClient(headers).(amqp091.Table), ContentType: "application/octet-stream", ContentEncoding: "identity",
		DeliveryMode: 2, Priority: 5, CorrelationId: "corr", ReplyTo: "rt", Expiration: "1000", MessageId: "mid",
		Timestamp: ts, Type: "typ", UserId: "guest", AppId: "app", Body: body,
	}
	if err := ch.PublishWithContext(context.Background(), "ex", "rk", true, false, pub); err != nil {
		t.Fatal(err)
	}
	var out published
	select {
	case out = <-got:
	case err := <-errc:
		t.Fatalf("server: %v", err)
	}
	if !reflect.DeepEqual(out.m, &BasicPublish{Exchange: "ex", RoutingKey: "rk", Mandatory: true}) {
		t.Errorf("publish %+v", out.m)
	}
	if !reflect.DeepEqual(out.cp["x-all"], sampleTable()) {
		t.Errorf("client properties: %#v", out.cp["x-all"])
	}
	want := Properties{
		Flags: 0xFFF8, Headers: headers, ContentType: "application/octet-stream", ContentEncoding: "identity",
		DeliveryMode: 2, Priority: 5, CorrelationID: "corr", ReplyTo: "rt", Expiration: "1000", MessageID: "mid",
		Timestamp: ts.UTC(), Type: "typ", UserID: "guest", AppID: "app",
	}
	if !reflect.DeepEqual(out.p, want) {
		t.Errorf("properties from amqp091-go:\n%+v\nwant\n%+v", out.p, want)
	}
	if !bytes.Equal(out.body, body) {
		t.Errorf("body: %d bytes", len(out.body))
	}

	dels, err := ch.Consume("q", "ctag", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-dels:
		if d.DeliveryTag != 77 || !d.Redelivered || d.Exchange != "ex" || d.RoutingKey != "rk" || d.ConsumerTag != "ctag" ||
			d.ContentType != pub.ContentType || d.MessageId != "mid" || !d.Timestamp.Equal(ts) || d.Priority != 5 ||
			!bytes.Equal(d.Body, body) || !reflect.DeepEqual(fromClient(d.Headers), headers) {
			t.Errorf("delivery as amqp091-go decoded it: %+v", d)
		}
	case err := <-errc:
		t.Fatalf("server: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v", err)
	}
}
