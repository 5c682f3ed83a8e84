package bridge

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func value(t *testing.T, s string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestParseShovelRefusals: issue 24. The definitions RabbitMQ 3.10.8's
// shovel plugin refuses are refused with its words (each message below
// was read from its API's 400 answer for the same value).
func TestParseShovelRefusals(t *testing.T) {
	for in, want := range map[string]string{
		`{"src-queue":"a","dest-uri":"amqp://","dest-queue":"d"}`:                                                              `Key "src-uri" not found in v`,
		`{"src-uri":"amqp://","dest-uri":"amqp://","dest-queue":"d"}`:                                                          `Must specify 'src-exchange' or 'src-queue'`,
		`{"src-uri":"amqp://","src-queue":"a","src-exchange":"x","dest-uri":"amqp://","dest-queue":"d"}`:                       `Cannot specify 'src-exchange' and 'src-queue'`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","dest-exchange":"x"}`:                      `Cannot specify 'dest-exchange' and 'dest-queue'`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","ack-mode":"bogus"}`:                       `ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>], actually was <<"bogus">>`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","src-delete-after":"bogus"}`:               `src-delete-after should be a number greater than or equal to 0, "never" or "queue-length", actually was <<"bogus">>`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","src-delete-after":-3}`:                    `src-delete-after should be a number greater than or equal to 0, "never" or "queue-length", actually was -3`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","src-delete-after":5,"ack-mode":"no-ack"}`: `Cannot specify 'no-ack' and numerical 'delete-after'`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","src-prefetch-count":"x"}`:                 `src-prefetch-count should be a number, actually was <<"x">>`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","dest-publish-properties":"x"}`:            `dest-publish-properties not a list <<"x">>`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","add-forward-headers":"yes"}`:              `add-forward-headers should be boolean, actually was <<"yes">>`,
		`{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"d","bogus-key":1}`:                            `Unrecognised terms [{<<"bogus-key">>,1}] in v`,
	} {
		_, err := ParseShovel("/", "v", value(t, in))
		ve, ok := err.(*ValidationError)
		if !ok || ve.Msg != want {
			t.Errorf("%s:\n got  %v\n want %s", in, err, want)
		}
	}
	// RabbitMQ's message for a bad URI names its parser's term; ours names the URI without its password.
	_, err := ParseShovel("/", "v", value(t, `{"src-uri":"http://u:pw@x","src-queue":"a","dest-uri":"amqp://","dest-queue":"d"}`))
	if err == nil || !strings.HasPrefix(err.Error(), `<<"http://x">> not a valid URI`) || strings.Contains(err.Error(), "pw") {
		t.Fatalf("bad URI: %v", err)
	}
}

// TestParseShovelDefaults: issue 24. What RabbitMQ takes, with its
// defaults and its legacy key names.
func TestParseShovelDefaults(t *testing.T) {
	d, err := ParseShovel("/", "s", value(t, `{"src-uri":["amqp://a","amqp://b"],"src-queue":"q","dest-uri":"amqp://"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.SrcURIs) != 2 || d.SrcPrefetch != 1000 || d.AckMode != OnConfirm || d.ReconnectDelay != 5*time.Second ||
		!d.SrcDeleteAfter.Never() || d.DestQueue != "" || d.DestExchange != nil || d.ForwardHeaders {
		t.Fatalf("defaults: %+v", d)
	}
	d, err = ParseShovel("/", "s", value(t, `{"src-uri":"amqp://","src-exchange":"x","src-exchange-key":"k.#",
		"dest-uri":"amqp://","dest-exchange":"y","dest-exchange-key":"z","prefetch-count":10,"delete-after":"queue-length",
		"add-forward-headers":true,"add-timestamp-header":true,"publish-properties":{"delivery_mode":2},
		"reconnect-delay":0,"ack-mode":"on-publish","src-queue-args":{"x-max-length":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.SrcExchange != "x" || d.SrcExchangeKey != "k.#" || *d.DestExchange != "y" || *d.DestExchangeKey != "z" ||
		d.SrcPrefetch != 10 || !d.SrcDeleteAfter.QueueLength || !d.ForwardHeaders || !d.TimestampHeader ||
		d.PublishProps["delivery_mode"] == nil || d.ReconnectDelay != 0 || d.AckMode != OnPublish ||
		d.SrcQueueArgs["x-max-length"] != int64(5) {
		t.Fatalf("legacy names: %+v", d)
	}
}
