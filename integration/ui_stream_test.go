package integration

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
	samqp "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// getJSONAuth GETs url as guest and decodes its JSON.
func getJSONAuth(url string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// testUIStreamPage (TestUI/StreamPage): issue 25, a replicated stream's
// page shows its log (segments, first and last offset and timestamp),
// its replicas with the leader, and its readers with their offsets and
// lag: an AMQP 0-9-1 consumer that acks nothing and a stream-protocol
// consumer.
func testUIStreamPage(t *testing.T) {
	chrome := uiChromium(t)
	c := warrentest.StartCluster(t, 3, warrentest.WithStreams())
	const name = "ui.stream"
	declareClusterStream(t, c.Node(0), name, amqp.Table{"x-queue-type": "stream"})
	publishStreamConfirmed(t, c.Node(0).URL(), name, bodiesRange("m", 0, 30))
	conn, err := amqp.Dial(c.Node(0).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	ch.Qos(5, 0, false)
	if _, err := ch.Consume(name, "ui-lagging", false, false, false, false, amqp.Table{"x-stream-offset": "first"}); err != nil {
		t.Fatal(err)
	}
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri("rabbitmq-stream://guest:guest@" + c.Node(0).StreamAddr() + "/%2f"))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	got := make(chan struct{}, 100)
	sc, err := env.NewConsumer(name, func(stream.ConsumerContext, *samqp.Message) { got <- struct{}{} },
		stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for range 30 {
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the stream consumer read nothing")
		}
	}

	// The client reads from a replica of its choice: the page of that
	// node lists the stream-protocol consumer (the lists are per node).
	at := -1
	testutil.EventuallyNil(t, 10*time.Second, "the node serving the stream consumer", func() error {
		for i, nd := range c.Nodes() {
			var cs []map[string]any
			if err := getJSONAuth(nd.MgmtURL()+"/api/stream/consumers", &cs); err == nil && len(cs) > 0 {
				at = i
				return nil
			}
		}
		return errors.New("no node lists it")
	})
	if at != 0 {
		// the AMQP 0-9-1 consumer on the same node
		conn2, err := amqp.Dial(c.Node(at).URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn2.Close()
		ch2, _ := conn2.Channel()
		ch2.Qos(5, 0, false)
		if _, err := ch2.Consume(name, "ui-lagging", false, false, false, false, amqp.Table{"x-stream-offset": "first"}); err != nil {
			t.Fatal(err)
		}
	}
	b := newUIBrowser(t, chrome)
	b.login(c.Node(at).MgmtURL(), "guest", "guest")
	b.do("the stream's page",
		chromedp.Navigate(c.Node(at).MgmtURL()+"/#/queues/%2F/"+name),
		chromedp.WaitVisible(uiSel("#q-stream #s-replicas tbody tr")))
	b.poll("three replicas", `document.querySelectorAll('#s-replicas tbody tr').length === 3`)
	if got := b.eval(`String([...document.querySelectorAll('#s-replicas td[data-col="role"]')].filter(td => td.textContent === 'leader').length)`); got != "1" {
		t.Errorf("leaders shown: %s, want 1", got)
	}
	text := b.text("#q-stream")
	for _, want := range []string{"Segments", "First offset", "Last timestamp", "Committed offset"} {
		if !strings.Contains(text, want) {
			t.Errorf("the stream section lacks %q:\n%s", want, text)
		}
	}
	b.poll("the lagging consumer", `!!document.querySelector('#s-consumers tr[data-consumer="ui-lagging"]')`)
	lag := b.text(`#s-consumers tr[data-consumer="ui-lagging"] td[data-col="lag"]`)
	if lag == "0" || lag == "" {
		t.Errorf("the lagging consumer's lag is %q", lag)
	}
	b.poll("the stream-protocol consumer", `[...document.querySelectorAll('#s-consumers tr td')].some(td => td.textContent === 'stream')`)
	b.shot("stream")
	b.checkContrast("stream page")
	b.checkNoExceptions()
}
