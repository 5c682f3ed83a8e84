package integration

// The management HTTP API (docs/management.md) driven endpoint by endpoint
// with rabbit-hole (raw net/http where rabbit-hole has no call, or hides
// the status), each scenario run against Warren and the reference
// RabbitMQ (see mgmt_helpers_test.go). Effects are checked over AMQP where
// the API could lie about itself: message counts with queue.declare
// passive, closes with NotifyClose, logins with real connections.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// amqpCount returns a queue's ready-message count over AMQP (passive
// declare), or -1 when the queue does not exist.
func (tg *mgmtTarget) amqpCount(t testing.TB, vhost, queue string) int {
	t.Helper()
	c, err := amqp.Dial(tg.amqpURLFor(tg.user, tg.pass, vhost))
	if err != nil {
		t.Fatalf("[%s] dial: %v", tg.kind, err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("[%s] channel: %v", tg.kind, err)
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return -1
		}
		t.Fatalf("[%s] passive declare %s: %v", tg.kind, queue, err)
	}
	return q.Messages
}

// amqpGet takes one message over AMQP (auto-ack).
func (tg *mgmtTarget) amqpGet(t testing.TB, vhost, queue string) (amqp.Delivery, bool) {
	t.Helper()
	ch := tg.channel(t, vhost)
	d, ok, err := ch.Get(queue, true)
	if err != nil {
		t.Fatalf("[%s] basic.get %s: %v", tg.kind, queue, err)
	}
	return d, ok
}

// apiGet is POST /api/queues/{vhost}/{q}/get.
func (tg *mgmtTarget) apiGet(vhost, queue string, body map[string]any) []map[string]any {
	tg.t.Helper()
	r := tg.must("POST", "/api/queues/"+esc(vhost)+"/"+esc(queue)+"/get", body, 200)
	arr, ok := r.json(tg.t).([]any)
	if !ok {
		tg.t.Fatalf("[%s] %s: want a JSON array", tg.kind, r)
	}
	out := make([]map[string]any, len(arr))
	for i, e := range arr {
		out[i], _ = e.(map[string]any)
	}
	return out
}

func rhStatus(err error) int {
	var re rabbithole.ErrorResponse
	if errors.As(err, &re) {
		return re.StatusCode
	}
	if err != nil && strings.Contains(err.Error(), "401") {
		return 401
	}
	return 0
}

func TestMgmtOverviewWhoamiNodes(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		tg.declareQueue(vh, "q1", nil)

		ov, err := tg.rh.Overview()
		if err != nil {
			t.Fatalf("overview: %v", err)
		}
		if ov.Node == "" || ov.ManagementVersion == "" || ov.RabbitMQVersion == "" {
			t.Errorf("overview: node %q management_version %q rabbitmq_version %q, want all set", ov.Node, ov.ManagementVersion, ov.RabbitMQVersion)
		}
		var types []string
		for _, x := range ov.ExchangeTypes {
			types = append(types, x.Name)
		}
		for _, want := range []string{"direct", "fanout", "topic", "headers"} {
			if !slices.Contains(types, want) {
				t.Errorf("overview exchange_types %v: missing %s", types, want)
			}
		}
		if !slices.ContainsFunc(ov.Listeners, func(l rabbithole.Listener) bool { return l.Protocol == "amqp" }) {
			t.Errorf("overview listeners %+v: no amqp listener", ov.Listeners)
		}
		// object_totals counts the queue declared above.
		if !eventually(func() bool {
			m, _ := tg.getJSON("/api/overview").(map[string]any)
			n, _ := dig(m, "object_totals", "queues").(float64)
			return n >= 1
		}) {
			t.Errorf("overview object_totals.queues never >= 1 with a queue declared")
		}

		me, err := tg.rh.Whoami()
		if err != nil {
			t.Fatalf("whoami: %v", err)
		}
		if me.Name != tg.user || !slices.Contains([]string(me.Tags), "administrator") {
			t.Errorf("whoami = %+v, want %s with tag administrator", me, tg.user)
		}

		nodes, err := tg.rh.ListNodes()
		if err != nil {
			t.Fatalf("nodes: %v", err)
		}
		if len(nodes) != 1 || nodes[0].Name != ov.Node || !nodes[0].IsRunning {
			t.Fatalf("nodes = %+v, want one running node named %q", nodes, ov.Node)
		}
		n, err := tg.rh.GetNode(ov.Node)
		if err != nil {
			t.Fatalf("node %s: %v", ov.Node, err)
		}
		if n.Name != ov.Node || !n.IsRunning || n.MemLimit <= 0 || n.FdTotal <= 0 {
			t.Errorf("node %s = name %q running %v mem_limit %d fd_total %d", ov.Node, n.Name, n.IsRunning, n.MemLimit, n.FdTotal)
		}
		// RabbitMQ 3.10.8 answers an unknown node with 500 and an empty
		// body (a crash in its handler); Warren follows the 404 rule.
		wantNode := 404
		if tg.isRabbit() {
			wantNode = 500
		}
		if r := tg.do("GET", "/api/nodes/no-such-node@nowhere", nil); r.status != wantNode {
			t.Errorf("unknown node: %s, want %d", r, wantNode)
		}

		cn, err := tg.rh.GetClusterName()
		if err != nil || cn.Name == "" {
			t.Errorf("cluster-name = %+v, %v", cn, err)
		}
		if _, ok := tg.getJSON("/api/extensions").([]any); !ok {
			t.Errorf("extensions: want a JSON array")
		}
	})
}

func TestMgmtConnectionsChannelsConsumers(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		tg.declareQueue(vh, "cq", nil)
		cn := mgmtName("conn")
		conn := tg.dial(t, vh, cn)
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		ch1, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Channel(); err != nil {
			t.Fatal(err)
		}
		if err := ch1.Qos(7, 0, false); err != nil {
			t.Fatal(err)
		}
		if _, err := ch1.Consume("cq", "ctag-1", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}

		c := tg.findConn(tg.user, tg.pass, cn)
		if c == nil {
			t.Fatalf("connection %q never listed in /api/connections", cn)
		}
		name, _ := c["name"].(string)
		if c["vhost"] != vh || c["user"] != tg.user || c["protocol"] != "AMQP 0-9-1" {
			t.Errorf("connection: vhost %v user %v protocol %v, want %s %s AMQP 0-9-1", c["vhost"], c["user"], c["protocol"], vh, tg.user)
		}
		// channels is a statistic: poll.
		if !eventually(func() bool {
			ci, err := tg.rh.GetConnection(name)
			return err == nil && ci.Channels == 2
		}) {
			ci, err := tg.rh.GetConnection(name)
			t.Errorf("GET connection %q: channels never 2: %+v %v", name, ci, err)
		}
		vconns, err := tg.rh.ListVhostConnections(vh)
		if err != nil || len(vconns) != 1 || vconns[0].Name != name {
			t.Errorf("vhost connections = %+v, %v; want just %q", vconns, err, name)
		}

		// Channels of the connection.
		var chans []any
		if !eventually(func() bool {
			chans, _ = tg.getJSON("/api/connections/" + esc(name) + "/channels").([]any)
			return len(chans) == 2
		}) {
			t.Fatalf("connection channels = %s, want 2", jsonString(chans))
		}
		var nums []int
		var chName string
		for _, e := range chans {
			if dig(e, "connection_details", "name") != name {
				t.Errorf("channel %s: connection_details.name, want %q", jsonString(e), name)
			}
			n, _ := dig(e, "number").(float64)
			nums = append(nums, int(n))
			if n == 1 {
				chName, _ = dig(e, "name").(string)
			}
		}
		sort.Ints(nums)
		if !slices.Equal(nums, []int{1, 2}) {
			t.Errorf("channel numbers %v, want [1 2]", nums)
		}
		// All channels, raw: on a busy RabbitMQ the list can hold a closing
		// channel with "connection_details":[], which rabbit-hole's
		// ListChannels cannot decode.
		if all := tg.getJSON("/api/channels"); len(findBy(all, "name", chName)) != 1 {
			t.Errorf("channels list: %q not listed", chName)
		}
		var chi *rabbithole.ChannelInfo
		if !eventually(func() bool {
			chi, err = tg.rh.GetChannel(chName)
			return err == nil && chi.ConsumerCount == 1 && chi.PrefetchCount == 7
		}) {
			t.Errorf("GET channel %q = %+v, %v; want consumer_count 1, prefetch_count 7", chName, chi, err)
		}

		// Consumers, all and per vhost. All, leniently: RabbitMQ 3.10
		// keeps listing the consumers of stream queues after their
		// connection closed, with "channel_details":[], which rabbit-hole
		// cannot decode (the stream tests leave such entries behind).
		allConsumers := func() ([]rabbithole.ConsumerInfo, error) {
			raw, _ := tg.getJSON("/api/consumers").([]any)
			var kept []any
			for _, c := range raw {
				if m, ok := c.(map[string]any); ok {
					if _, isObj := m["channel_details"].(map[string]any); isObj {
						kept = append(kept, c)
					}
				}
			}
			data, err := json.Marshal(kept)
			if err != nil {
				return nil, err
			}
			var out []rabbithole.ConsumerInfo
			return out, json.Unmarshal(data, &out)
		}
		for _, list := range []func() ([]rabbithole.ConsumerInfo, error){allConsumers, func() ([]rabbithole.ConsumerInfo, error) { return tg.rh.ListConsumersIn(vh) }} {
			var cons []rabbithole.ConsumerInfo
			found := eventually(func() bool {
				cons, err = list()
				return err == nil && slices.ContainsFunc(cons, func(c rabbithole.ConsumerInfo) bool { return c.ConsumerTag == "ctag-1" && c.Queue.Vhost == vh })
			})
			if !found {
				t.Errorf("consumers: ctag-1 on %s never listed (%v): %+v", vh, err, cons)
				continue
			}
			i := slices.IndexFunc(cons, func(c rabbithole.ConsumerInfo) bool { return c.ConsumerTag == "ctag-1" && c.Queue.Vhost == vh })
			co := cons[i]
			if co.Queue.Name != "cq" || co.ChannelDetails.ConnectionName != name || co.ChannelDetails.Number != 1 || co.AcknowledgementMode != rabbithole.ManualAcknowledgement || co.PrefetchCount != 7 {
				t.Errorf("consumer = %+v; want queue cq, connection %q, channel 1, ack_required, prefetch 7", co, name)
			}
		}
		if cons, err := tg.rh.ListConsumersIn(mgmtName("nope")); err == nil {
			t.Errorf("consumers of an unknown vhost = %+v, want 404", cons)
		}

		// DELETE closes the connection with 320 CONNECTION_FORCED.
		if _, err := tg.rh.CloseConnection(name); err != nil {
			t.Fatalf("DELETE connection: %v", err)
		}
		select {
		case e := <-closed:
			if e == nil || e.Code != amqp.ConnectionForced {
				t.Errorf("connection closed with %v, want 320 CONNECTION_FORCED", e)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("connection not closed %v after DELETE", waitTimeout)
		}
		if !eventually(func() bool { return tg.do("GET", "/api/connections/"+esc(name), nil).status == 404 }) {
			t.Errorf("GET connection after DELETE: %s, want 404", tg.do("GET", "/api/connections/"+esc(name), nil))
		}
		if r := tg.do("DELETE", "/api/connections/"+esc(name), nil); r.status != 404 {
			t.Errorf("DELETE unknown connection: %s, want 404", r)
		}
	})
}

func TestMgmtExchanges(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		if _, err := tg.rh.DeclareExchange(vh, "ex-topic", rabbithole.ExchangeSettings{Type: "topic", Durable: true, Arguments: map[string]any{"alternate-exchange": "ae"}}); err != nil {
			t.Fatalf("declare exchange: %v", err)
		}
		if _, err := tg.rh.DeclareExchange(vh, "ex-fan", rabbithole.ExchangeSettings{Type: "fanout", AutoDelete: true}); err != nil {
			t.Fatalf("declare exchange: %v", err)
		}
		in, err := tg.rh.ListExchangesIn(vh)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, x := range in {
			got = append(got, x.Name)
			if x.Vhost != vh {
				t.Errorf("exchange %q listed with vhost %q, want %q", x.Name, x.Vhost, vh)
			}
		}
		for _, want := range []string{"", "amq.direct", "amq.fanout", "amq.headers", "amq.match", "amq.topic", "ex-fan", "ex-topic"} {
			if !slices.Contains(got, want) {
				t.Errorf("exchanges of %s = %q: missing %q", vh, got, want)
			}
		}
		all, err := tg.rh.ListExchanges()
		if err != nil || !slices.ContainsFunc(all, func(x rabbithole.ExchangeInfo) bool { return x.Vhost == vh && x.Name == "ex-topic" }) {
			t.Errorf("all exchanges: ex-topic in %s not listed (%v)", vh, err)
		}
		x, err := tg.rh.GetExchange(vh, "ex-topic")
		if err != nil {
			t.Fatal(err)
		}
		if x.Type != "topic" || !x.Durable || x.AutoDelete || x.Internal || x.Arguments["alternate-exchange"] != "ae" || x.Vhost != vh {
			t.Errorf("GET exchange = %+v", x)
		}
		if f, _ := tg.rh.GetExchange(vh, "ex-fan"); f == nil || !f.AutoDelete || f.Durable || f.Type != "fanout" {
			t.Errorf("GET ex-fan = %+v, want auto_delete fanout", f)
		}
		if _, err := tg.rh.GetExchange(vh, "nope"); rhStatus(err) != 404 {
			t.Errorf("GET unknown exchange: %v, want 404", err)
		}

		// Publish through the API.
		tg.declareQueue(vh, "xq", nil)
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/ex-topic/q/xq", map[string]any{"routing_key": "a.*"}, 201)
		pub := func(ex, key string, props map[string]any) any {
			r := tg.must("POST", "/api/exchanges/"+esc(vh)+"/"+esc(ex)+"/publish",
				map[string]any{"properties": props, "routing_key": key, "payload": "p-" + key, "payload_encoding": "string"}, 200)
			return dig(r.json(t), "routed")
		}
		if got := pub("ex-topic", "a.b", map[string]any{"delivery_mode": 2, "headers": map[string]any{"h": "v"}}); got != true {
			t.Errorf("publish a.b: routed = %v, want true", got)
		}
		if got := pub("ex-topic", "zz", map[string]any{}); got != false {
			t.Errorf("publish zz: routed = %v, want false", got)
		}
		if got := pub("amq.default", "xq", map[string]any{}); got != true {
			t.Errorf("publish via amq.default: routed = %v, want true", got)
		}
		d, ok := tg.amqpGet(t, vh, "xq")
		if !ok || string(d.Body) != "p-a.b" || d.DeliveryMode != 2 || d.Headers["h"] != "v" || d.RoutingKey != "a.b" || d.Exchange != "ex-topic" {
			t.Errorf("published message = ok %v body %q mode %d headers %v rk %q ex %q", ok, d.Body, d.DeliveryMode, d.Headers, d.RoutingKey, d.Exchange)
		}
		if d, ok := tg.amqpGet(t, vh, "xq"); !ok || string(d.Body) != "p-xq" {
			t.Errorf("second message = %v %q, want p-xq", ok, d.Body)
		}
		// RabbitMQ answers a publish to an unknown exchange with the
		// channel error it got: 400 {"error":"bad_request","reason":"404
		// NOT_FOUND - no exchange 'nope' in vhost '...'"}.
		if r := tg.do("POST", "/api/exchanges/"+esc(vh)+"/nope/publish", map[string]any{"properties": map[string]any{}, "routing_key": "", "payload": "", "payload_encoding": "string"}); r.status != 400 ||
			r.errorBody() != "bad_request: 404 NOT_FOUND - no exchange 'nope' in vhost '"+vh+"'" {
			t.Errorf("publish to unknown exchange: %s, want 400 bad_request 404 NOT_FOUND", r)
		}

		if _, err := tg.rh.DeleteExchange(vh, "ex-topic"); err != nil {
			t.Fatal(err)
		}
		if r := tg.do("GET", "/api/exchanges/"+esc(vh)+"/ex-topic", nil); r.status != 404 {
			t.Errorf("GET deleted exchange: %s, want 404", r)
		}
		if r := tg.do("DELETE", "/api/exchanges/"+esc(vh)+"/ex-topic", nil); r.status != 404 {
			t.Errorf("DELETE deleted exchange: %s, want 404", r)
		}
		// Deleting the exchange removed its binding.
		if b, _ := tg.rh.ListQueueBindings(vh, "xq"); len(b) != 1 {
			t.Errorf("bindings of xq after deleting ex-topic = %+v, want only the default one", b)
		}
	})
}

func TestMgmtQueues(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		for _, q := range []string{"q-c", "q-a", "q-b"} {
			s := rabbithole.QueueSettings{Durable: q != "q-c"}
			if q == "q-a" {
				s.Arguments = map[string]any{"x-max-length": 5, "x-queue-mode": "lazy"}
			}
			if _, err := tg.rh.DeclareQueue(vh, q, s); err != nil {
				t.Fatalf("declare %s: %v", q, err)
			}
		}
		// Redeclaring with the same settings is fine.
		if _, err := tg.rh.DeclareQueue(vh, "q-a", rabbithole.QueueSettings{Durable: true, Arguments: map[string]any{"x-max-length": 5, "x-queue-mode": "lazy"}}); err != nil {
			t.Errorf("redeclare q-a: %v", err)
		}
		qs, err := tg.rh.ListQueuesIn(vh)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, q := range qs {
			got = append(got, q.Name)
		}
		if !slices.Equal(got, []string{"q-a", "q-b", "q-c"}) {
			t.Errorf("queues of %s = %q, want [q-a q-b q-c] in name order", vh, got)
		}
		all, err := tg.rh.ListQueues()
		if err != nil || !slices.ContainsFunc(all, func(q rabbithole.QueueInfo) bool { return q.Vhost == vh && q.Name == "q-b" }) {
			t.Errorf("all queues: q-b in %s not listed (%v)", vh, err)
		}

		// Paging.
		p, err := tg.rh.PagedListQueuesWithParametersIn(vh, url.Values{"page": {"1"}, "page_size": {"2"}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Page != 1 || p.PageCount != 2 || p.PageSize != 2 || p.ItemCount != 2 || p.TotalCount != 3 || p.FilteredCount != 3 || len(p.Items) != 2 || p.Items[0].Name != "q-a" || p.Items[1].Name != "q-b" {
			t.Errorf("page 1 of 2 = %+v", p)
		}
		p, err = tg.rh.PagedListQueuesWithParametersIn(vh, url.Values{"page": {"2"}, "page_size": {"2"}})
		if err != nil || p.Page != 2 || p.ItemCount != 1 || len(p.Items) != 1 || p.Items[0].Name != "q-c" {
			t.Errorf("page 2 of 2 = %+v, %v", p, err)
		}
		p, err = tg.rh.PagedListQueuesWithParametersIn(vh, url.Values{"page": {"1"}, "page_size": {"2"}, "sort": {"name"}, "sort_reverse": {"true"}})
		if err != nil || len(p.Items) != 2 || p.Items[0].Name != "q-c" || p.Items[1].Name != "q-b" {
			t.Errorf("page sorted by name reversed = %+v, %v", p, err)
		}
		p, err = tg.rh.PagedListQueuesWithParametersIn(vh, url.Values{"page": {"1"}, "page_size": {"10"}, "name": {"q-[ab]"}, "use_regex": {"true"}})
		if err != nil || p.FilteredCount != 2 || p.TotalCount != 3 || len(p.Items) != 2 {
			t.Errorf("page with name regex q-[ab] = %+v, %v; want filtered_count 2 of 3", p, err)
		}
		// All vhosts, paged: the totals include ours.
		pa, err := tg.rh.PagedListQueuesWithParameters(url.Values{"page": {"1"}, "page_size": {"2"}})
		if err != nil || pa.PageSize != 2 || len(pa.Items) != 2 || pa.TotalCount < 3 {
			t.Errorf("all queues page 1 = %+v, %v", pa, err)
		}
		// columns= trims each item to those keys. RabbitMQ shows
		// "messages" only once the queue's first statistics are in: poll.
		var cols []any
		colKeys := func() []string {
			var all []string
			for _, c := range cols {
				m, _ := c.(map[string]any)
				var keys []string
				for k := range m {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				all = append(all, strings.Join(keys, ","))
			}
			return all
		}
		if !eventually(func() bool {
			cols, _ = tg.getJSON("/api/queues/" + esc(vh) + "?columns=name,messages").([]any)
			return slices.Equal(colKeys(), []string{"messages,name", "messages,name", "messages,name"})
		}) {
			t.Errorf("columns=name,messages: item keys %q, want 3 items with just messages and name", colKeys())
		}
		pc, _ := tg.getJSON("/api/queues/" + esc(vh) + "?page=1&page_size=2&columns=name").(map[string]any)
		if items, _ := pc["items"].([]any); len(items) != 2 || len(items[0].(map[string]any)) != 1 || pc["total_count"] != 3.0 {
			t.Errorf("paged with columns=name = %s", jsonString(pc))
		}

		q, err := tg.rh.GetQueue(vh, "q-a")
		if err != nil {
			t.Fatal(err)
		}
		if q.Name != "q-a" || q.Vhost != vh || !q.Durable || bool(q.AutoDelete) || q.Exclusive || q.Type != "classic" ||
			!jsonEqual(q.Arguments, map[string]any{"x-max-length": 5, "x-queue-mode": "lazy"}) {
			t.Errorf("GET q-a = %+v", q)
		}
		if _, err := tg.rh.GetQueue(vh, "nope"); rhStatus(err) != 404 {
			t.Errorf("GET unknown queue: %v, want 404", err)
		}

		// Messages, delete if-empty, purge.
		for i := 0; i < 3; i++ {
			tg.publishAPI(vh, "", "q-b", "m", nil)
		}
		tg.waitQueueField(vh, "q-b", "messages", 3)
		if r := tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-b?if-empty=true", nil); r.status != 400 {
			t.Errorf("DELETE non-empty queue if-empty: %s, want 400", r)
		}
		if n := tg.amqpCount(t, vh, "q-b"); n != 3 {
			t.Errorf("q-b after refused delete: %d messages, want 3", n)
		}
		if _, err := tg.rh.PurgeQueue(vh, "q-b"); err != nil {
			t.Fatalf("purge: %v", err)
		}
		if n := tg.amqpCount(t, vh, "q-b"); n != 0 {
			t.Errorf("q-b after purge: %d messages, want 0", n)
		}
		if r := tg.do("DELETE", "/api/queues/"+esc(vh)+"/nope/contents", nil); r.status != 404 {
			t.Errorf("purge unknown queue: %s, want 404", r)
		}
		if _, err := tg.rh.DeleteQueue(vh, "q-b", rabbithole.QueueDeleteOptions{IfEmpty: true}); err != nil {
			t.Errorf("delete empty q-b if-empty: %v", err)
		}
		if n := tg.amqpCount(t, vh, "q-b"); n != -1 {
			t.Errorf("q-b after delete: still there (%d messages)", n)
		}

		// if-unused with a consumer.
		ch := tg.channel(t, vh)
		if _, err := ch.Consume("q-c", "", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if r := tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-c?if-unused=true", nil); r.status != 400 {
			t.Errorf("DELETE used queue if-unused: %s, want 400", r)
		}
		if n := tg.amqpCount(t, vh, "q-c"); n != 0 {
			t.Errorf("q-c after refused delete: %d, want it there and empty", n)
		}
		if _, err := tg.rh.DeleteQueue(vh, "q-c"); err != nil {
			t.Errorf("delete q-c: %v", err)
		}
		if r := tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-c", nil); r.status != 404 {
			t.Errorf("DELETE deleted queue: %s, want 404", r)
		}
	})
}

func TestMgmtQueueGet(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		tg.declareQueue(vh, "dlq", nil)
		tg.declareQueue(vh, "gq", map[string]any{"durable": false, "arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}})
		ch := tg.channel(t, vh)
		publish(t, ch, "", "gq", amqp.Publishing{Body: []byte("hello world"), Headers: amqp.Table{"h": "v"}, ContentType: "text/plain"})
		publish(t, ch, "", "gq", amqp.Publishing{Body: []byte{0, 1, 2, 0xff}})
		get := func(body map[string]any) []map[string]any { return tg.apiGet(vh, "gq", body) }

		// ack_requeue_true leaves the messages, marked redelivered.
		ms := get(map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
		if len(ms) != 1 || ms[0]["payload"] != "hello world" || ms[0]["payload_encoding"] != "string" || ms[0]["redelivered"] != false ||
			ms[0]["message_count"] != 1.0 || ms[0]["payload_bytes"] != 11.0 || ms[0]["routing_key"] != "gq" || ms[0]["exchange"] != "" ||
			dig(ms[0], "properties", "headers", "h") != "v" || dig(ms[0], "properties", "content_type") != "text/plain" {
			t.Errorf("get 1 ack_requeue_true = %s", jsonString(ms))
		}
		if n := tg.amqpCount(t, vh, "gq"); n != 2 {
			t.Errorf("after ack_requeue_true: %d messages, want 2", n)
		}
		ms = get(map[string]any{"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"})
		if len(ms) != 2 || ms[0]["redelivered"] != true || ms[1]["payload_encoding"] != "base64" || ms[1]["payload"] != base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}) {
			t.Errorf("get 5 ack_requeue_true = %s; want 2, first redelivered, second base64 (binary)", jsonString(ms))
		}
		// base64 forced, truncate.
		ms = get(map[string]any{"count": 1, "ackmode": "reject_requeue_true", "encoding": "base64", "truncate": 5})
		if len(ms) != 1 || ms[0]["payload_encoding"] != "base64" || ms[0]["payload"] != base64.StdEncoding.EncodeToString([]byte("hello")) || ms[0]["payload_bytes"] != 11.0 {
			t.Errorf("get base64 truncate 5 = %s; want aGVsbG8= with payload_bytes 11", jsonString(ms))
		}
		if n := tg.amqpCount(t, vh, "gq"); n != 2 {
			t.Errorf("after reject_requeue_true: %d messages, want 2", n)
		}
		// ack_requeue_false removes without dead-lettering.
		ms = get(map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
		if len(ms) != 1 || ms[0]["payload"] != "hello world" {
			t.Errorf("get ack_requeue_false = %s", jsonString(ms))
		}
		if n, d := tg.amqpCount(t, vh, "gq"), tg.amqpCount(t, vh, "dlq"); n != 1 || d != 0 {
			t.Errorf("after ack_requeue_false: gq %d dlq %d, want 1 and 0", n, d)
		}
		// reject_requeue_false removes and dead-letters (reason rejected).
		ms = get(map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
		if len(ms) != 1 || ms[0]["payload_encoding"] != "base64" {
			t.Errorf("get reject_requeue_false = %s", jsonString(ms))
		}
		// The dead letter is published by gq's flusher (issue 12): wait for it.
		eventually(func() bool { return tg.amqpCount(t, vh, "dlq") == 1 })
		if n, d := tg.amqpCount(t, vh, "gq"), tg.amqpCount(t, vh, "dlq"); n != 0 || d != 1 {
			t.Errorf("after reject_requeue_false: gq %d dlq %d, want 0 and 1", n, d)
		}
		dl := tg.apiGet(vh, "dlq", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
		var xd []any
		if len(dl) == 1 {
			xd, _ = dig(dl[0], "properties", "headers", "x-death").([]any)
		}
		if len(xd) != 1 || dig(xd[0], "reason") != "rejected" || dig(xd[0], "queue") != "gq" || dig(xd[0], "count") != 1.0 {
			t.Errorf("dead-lettered message x-death = %s", jsonString(xd))
		}
		// Empty queue: [].
		if ms := get(map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}); len(ms) != 0 {
			t.Errorf("get from empty queue = %s, want []", jsonString(ms))
		}
		if r := tg.do("POST", "/api/queues/"+esc(vh)+"/nope/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}); r.status != 404 {
			t.Errorf("get from unknown queue: %s, want 404", r)
		}
	})
}

func TestMgmtBindings(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		tg.declareQueue(vh, "bq", nil)
		for x, typ := range map[string]string{"src": "direct", "dst": "fanout", "hx": "headers"} {
			if _, err := tg.rh.DeclareExchange(vh, x, rabbithole.ExchangeSettings{Type: typ}); err != nil {
				t.Fatal(err)
			}
		}
		decl := []rabbithole.BindingInfo{
			{Source: "src", Destination: "bq", DestinationType: "queue", RoutingKey: "k1"},
			{Source: "hx", Destination: "bq", DestinationType: "queue", RoutingKey: "k2", Arguments: map[string]any{"x-match": "all", "a": "1"}},
			{Source: "src", Destination: "dst", DestinationType: "exchange", RoutingKey: "k3"},
		}
		for _, b := range decl {
			res, err := tg.rh.DeclareBinding(vh, b)
			if err != nil {
				t.Fatalf("declare binding %+v: %v", b, err)
			}
			if res.StatusCode != 201 || res.Header.Get("Location") == "" {
				t.Errorf("declare binding %s->%s: status %d Location %q, want 201 with a Location", b.Source, b.Destination, res.StatusCode, res.Header.Get("Location"))
			}
		}
		key := func(bs []rabbithole.BindingInfo) []string {
			var out []string
			for _, b := range bs {
				out = append(out, b.Source+">"+b.DestinationType[:1]+":"+b.Destination+"/"+b.RoutingKey)
			}
			sort.Strings(out)
			return out
		}
		check := func(what string, bs []rabbithole.BindingInfo, err error, want ...string) {
			t.Helper()
			if err != nil {
				t.Errorf("%s: %v", what, err)
				return
			}
			sort.Strings(want)
			if got := key(bs); !slices.Equal(got, want) {
				t.Errorf("%s = %q, want %q", what, got, want)
			}
		}
		bs, err := tg.rh.ListBindingsIn(vh)
		check("bindings of vhost", bs, err, ">q:bq/bq", "src>q:bq/k1", "hx>q:bq/k2", "src>e:dst/k3")
		var hxProps string
		for _, b := range bs {
			if b.Vhost != vh {
				t.Errorf("binding %+v: vhost %q", b, b.Vhost)
			}
			if b.Source == "hx" {
				hxProps = b.PropertiesKey
				if !jsonEqual(b.Arguments, map[string]any{"x-match": "all", "a": "1"}) {
					t.Errorf("headers binding arguments = %v", b.Arguments)
				}
			} else if b.PropertiesKey != b.RoutingKey {
				t.Errorf("binding %s->%s %q: properties_key %q, want the routing key (no arguments)", b.Source, b.Destination, b.RoutingKey, b.PropertiesKey)
			}
		}
		if !strings.HasPrefix(hxProps, "k2~") {
			t.Errorf("headers binding properties_key = %q, want k2~<hash of the arguments>", hxProps)
		}
		all, err := tg.rh.ListBindings()
		if err != nil || !slices.ContainsFunc(all, func(b rabbithole.BindingInfo) bool {
			return b.Vhost == vh && b.Source == "src" && b.Destination == "dst"
		}) {
			t.Errorf("all bindings: src->dst in %s not listed (%v)", vh, err)
		}
		bs, err = tg.rh.ListQueueBindings(vh, "bq")
		check("bindings of queue bq", bs, err, ">q:bq/bq", "src>q:bq/k1", "hx>q:bq/k2")
		bs, err = tg.rh.ListExchangeBindingsWithSource(vh, "src")
		check("bindings with source src", bs, err, "src>q:bq/k1", "src>e:dst/k3")
		bs, err = tg.rh.ListExchangeBindingsWithDestination(vh, "dst")
		check("bindings with destination dst", bs, err, "src>e:dst/k3")
		bs, err = tg.rh.ListExchangeBindingsWithDestination(vh, "src")
		check("bindings with destination src", bs, err)
		bs, err = tg.rh.ListQueueBindingsBetween(vh, "src", "bq")
		check("bindings src->bq", bs, err, "src>q:bq/k1")
		bs, err = tg.rh.ListExchangeBindingsBetween(vh, "src", "dst")
		check("bindings src->dst", bs, err, "src>e:dst/k3")
		one := tg.getJSON("/api/bindings/" + esc(vh) + "/e/hx/q/bq/" + esc(hxProps))
		if dig(one, "routing_key") != "k2" || dig(one, "properties_key") != hxProps {
			t.Errorf("GET binding by properties_key = %s", jsonString(one))
		}
		if r := tg.do("GET", "/api/bindings/"+esc(vh)+"/e/src/q/bq/nope", nil); r.status != 404 {
			t.Errorf("GET unknown binding: %s, want 404", r)
		}

		// Effect: routing through src reaches bq (k1) and dst (k3).
		pubRouted := func(key string) any {
			r := tg.must("POST", "/api/exchanges/"+esc(vh)+"/src/publish", map[string]any{"properties": map[string]any{}, "routing_key": key, "payload": "x", "payload_encoding": "string"}, 200)
			return dig(r.json(t), "routed")
		}
		if pubRouted("k1") != true {
			t.Errorf("publish src/k1: not routed")
		}
		// Delete by properties_key.
		for _, b := range []rabbithole.BindingInfo{
			{Source: "hx", Destination: "bq", DestinationType: "queue", PropertiesKey: hxProps},
			{Source: "src", Destination: "bq", DestinationType: "queue", PropertiesKey: "k1"},
			{Source: "src", Destination: "dst", DestinationType: "exchange", PropertiesKey: "k3"},
		} {
			res, err := tg.rh.DeleteBinding(vh, b)
			if err != nil || res.StatusCode != 204 {
				t.Errorf("delete binding %+v: %v %v, want 204", b, res, err)
			}
		}
		bs, err = tg.rh.ListBindingsIn(vh)
		check("bindings after deletes", bs, err, ">q:bq/bq")
		if pubRouted("k1") != false {
			t.Errorf("publish src/k1 after unbinding: routed")
		}
		if r := tg.do("DELETE", "/api/bindings/"+esc(vh)+"/e/src/q/bq/k1", nil); r.status != 404 {
			t.Errorf("DELETE deleted binding: %s, want 404", r)
		}
	})
}

func TestMgmtVhosts(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := mgmtName("vh")
		if _, err := tg.rh.PutVhost(vh, rabbithole.VhostSettings{Description: "made by a test", Tags: rabbithole.VhostTags{"a", "b"}}); err != nil {
			t.Fatalf("PUT vhost: %v", err)
		}
		t.Cleanup(func() { tg.do("DELETE", "/api/vhosts/"+esc(vh), nil) })
		// RabbitMQ gives the user who creates a vhost full permissions on it.
		if p, _ := tg.getJSON("/api/vhosts/" + esc(vh) + "/permissions").([]any); len(findBy(p, "user", tg.user)) != 1 {
			t.Errorf("permissions of a new vhost = %s, want full permissions for its creator %s", jsonString(p), tg.user)
		}
		v, err := tg.rh.GetVhost(vh)
		if err != nil {
			t.Fatal(err)
		}
		if v.Name != vh || v.Description != "made by a test" || !slices.Equal([]string(v.Tags), []string{"a", "b"}) {
			t.Errorf("GET vhost = %+v", v)
		}
		vs, err := tg.rh.ListVhosts()
		if err != nil || !slices.ContainsFunc(vs, func(v rabbithole.VhostInfo) bool { return v.Name == vh }) || !slices.ContainsFunc(vs, func(v rabbithole.VhostInfo) bool { return v.Name == "/" }) {
			t.Errorf("vhosts: %s or / missing (%v)", vh, err)
		}
		tg.permit(vh, tg.user)
		perms, _ := tg.getJSON("/api/vhosts/" + esc(vh) + "/permissions").([]any)
		if len(findBy(perms, "user", tg.user)) != 1 {
			t.Errorf("vhost permissions = %s, want %s", jsonString(perms), tg.user)
		}
		c := tg.dial(t, vh, "")
		closed := c.NotifyClose(make(chan *amqp.Error, 1))
		tg.declareQueue(vh, "vq", nil)
		if _, err := tg.rh.DeleteVhost(vh); err != nil {
			t.Fatal(err)
		}
		if r := tg.do("GET", "/api/vhosts/"+esc(vh), nil); r.status != 404 {
			t.Errorf("GET deleted vhost: %s, want 404", r)
		}
		if r := tg.do("GET", "/api/queues/"+esc(vh), nil); r.status != 404 {
			t.Errorf("GET queues of deleted vhost: %s, want 404", r)
		}
		if r := tg.do("DELETE", "/api/vhosts/"+esc(vh), nil); r.status != 404 {
			t.Errorf("DELETE deleted vhost: %s, want 404", r)
		}
		// Its connections are closed, and new ones refused.
		select {
		case e := <-closed:
			if e == nil {
				t.Errorf("connection to deleted vhost closed without an error")
			}
		case <-time.After(waitTimeout):
			t.Errorf("connection to deleted vhost still open after %v", waitTimeout)
		}
		if c, err := amqp.Dial(tg.amqpURLFor(tg.user, tg.pass, vh)); err == nil {
			c.Close()
			t.Errorf("AMQP connection to deleted vhost accepted")
		}
	})
}

func TestMgmtUsers(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		u1, u2 := mgmtName("u1"), mgmtName("u2")
		t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u1), nil); tg.do("DELETE", "/api/users/"+esc(u2), nil) })
		if _, err := tg.rh.PutUser(u1, rabbithole.UserSettings{Password: "pw-1", Tags: rabbithole.UserTags{"management", "policymaker"}}); err != nil {
			t.Fatalf("PUT user with password: %v", err)
		}
		hash := rabbithole.Base64EncodedSaltedPasswordHashSHA256("pw-2")
		if _, err := tg.rh.PutUser(u2, rabbithole.UserSettings{PasswordHash: hash, HashingAlgorithm: rabbithole.HashingAlgorithmSHA256, Tags: rabbithole.UserTags{"monitoring"}}); err != nil {
			t.Fatalf("PUT user with password_hash: %v", err)
		}
		u, err := tg.rh.GetUser(u1)
		if err != nil {
			t.Fatal(err)
		}
		tags := []string(u.Tags)
		sort.Strings(tags)
		if u.Name != u1 || !slices.Equal(tags, []string{"management", "policymaker"}) || u.PasswordHash == "" || u.HashingAlgorithm != rabbithole.HashingAlgorithmSHA256 {
			t.Errorf("GET user = %+v", u)
		}
		if u, err := tg.rh.GetUser(u2); err != nil || u.PasswordHash != hash || !slices.Equal([]string(u.Tags), []string{"monitoring"}) {
			t.Errorf("GET user with hash = %+v, %v; want password_hash %q", u, err, hash)
		}
		us, err := tg.rh.ListUsers()
		if err != nil || !slices.ContainsFunc(us, func(u rabbithole.UserInfo) bool { return u.Name == u1 }) || !slices.ContainsFunc(us, func(u rabbithole.UserInfo) bool { return u.Name == u2 }) {
			t.Errorf("users: %s or %s missing (%v)", u1, u2, err)
		}
		// Both log in to the API and over AMQP.
		for _, c := range []struct{ user, pass, tag string }{{u1, "pw-1", "management"}, {u2, "pw-2", "monitoring"}} {
			me, err := tg.client(c.user, c.pass).Whoami()
			if err != nil || me.Name != c.user || !slices.Contains([]string(me.Tags), c.tag) {
				t.Errorf("whoami as %s = %+v, %v", c.user, me, err)
			}
			tg.permit(vh, c.user)
			conn, err := amqp.Dial(tg.amqpURLFor(c.user, c.pass, vh))
			if err != nil {
				t.Errorf("AMQP login as %s: %v", c.user, err)
			} else {
				conn.Close()
			}
		}
		// Change the password: the old one stops working.
		if _, err := tg.rh.PutUser(u1, rabbithole.UserSettings{Password: "pw-1b", Tags: rabbithole.UserTags{"management"}}); err != nil {
			t.Fatal(err)
		}
		if r := tg.doAs(u1, "pw-1", "GET", "/api/whoami", nil); r.status != 401 {
			t.Errorf("whoami with the old password: %s, want 401", r)
		}
		if me, err := tg.client(u1, "pw-1b").Whoami(); err != nil || !slices.Equal([]string(me.Tags), []string{"management"}) {
			t.Errorf("whoami with the new password = %+v, %v; want tags [management]", me, err)
		}
		if _, err := tg.rh.DeleteUser(u1); err != nil {
			t.Fatal(err)
		}
		if r := tg.do("GET", "/api/users/"+esc(u1), nil); r.status != 404 {
			t.Errorf("GET deleted user: %s, want 404", r)
		}
		if r := tg.doAs(u1, "pw-1b", "GET", "/api/whoami", nil); r.status != 401 {
			t.Errorf("whoami as deleted user: %s, want 401", r)
		}
		if c, err := amqp.Dial(tg.amqpURLFor(u1, "pw-1b", vh)); err == nil {
			c.Close()
			t.Errorf("AMQP login as deleted user accepted")
		}
		if r := tg.do("DELETE", "/api/users/"+esc(u1), nil); r.status != 404 {
			t.Errorf("DELETE deleted user: %s, want 404", r)
		}
		// Its permissions went with it.
		if p, _ := tg.getJSON("/api/vhosts/" + esc(vh) + "/permissions").([]any); len(findBy(p, "user", u1)) != 0 {
			t.Errorf("permissions of deleted user still listed: %s", jsonString(p))
		}
	})
}

func TestMgmtPermissions(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		u := tg.newUser(t, "perm", "management")
		want := rabbithole.Permissions{Configure: "^own-", Write: ".*", Read: "^own-"}
		if _, err := tg.rh.UpdatePermissionsIn(vh, u, want); err != nil {
			t.Fatal(err)
		}
		p, err := tg.rh.GetPermissionsIn(vh, u)
		if err != nil || p.User != u || p.Vhost != vh || p.Configure != want.Configure || p.Write != want.Write || p.Read != want.Read {
			t.Errorf("GET permissions = %+v, %v", p, err)
		}
		has := func(ps []rabbithole.PermissionInfo) bool {
			return slices.ContainsFunc(ps, func(p rabbithole.PermissionInfo) bool { return p.User == u && p.Vhost == vh && p.Configure == "^own-" })
		}
		if ps, err := tg.rh.ListPermissions(); err != nil || !has(ps) {
			t.Errorf("all permissions: %s on %s missing (%v)", u, vh, err)
		}
		if ps, err := tg.rh.ListPermissionsOf(u); err != nil || len(ps) != 1 || !has(ps) {
			t.Errorf("permissions of user = %+v, %v", ps, err)
		}
		vp, _ := tg.getJSON("/api/vhosts/" + esc(vh) + "/permissions").([]any)
		if len(findBy(vp, "user", u)) != 1 {
			t.Errorf("permissions of vhost = %s, want %s", jsonString(vp), u)
		}
		// Effect over AMQP: configure only ^own-.
		conn := tg.dialAs(t, u, u, vh, "")
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("own-q", false, true, false, false, nil); err != nil {
			t.Errorf("declare own-q with configure ^own-: %v", err)
		}
		_, err = ch.QueueDeclare("other-q", false, true, false, false, nil)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
			t.Errorf("declare other-q with configure ^own-: %v, want 403 ACCESS_REFUSED", err)
		}
		// Effect over the API: the user sees the vhost's queues.
		if r := tg.doAs(u, u, "GET", "/api/queues/"+esc(vh), nil); r.status != 200 {
			t.Errorf("GET queues as a permitted management user: %s", r)
		}
		if _, err := tg.rh.ClearPermissionsIn(vh, u); err != nil {
			t.Fatal(err)
		}
		if r := tg.do("GET", "/api/permissions/"+esc(vh)+"/"+esc(u), nil); r.status != 404 {
			t.Errorf("GET cleared permissions: %s, want 404", r)
		}
		if r := tg.do("DELETE", "/api/permissions/"+esc(vh)+"/"+esc(u), nil); r.status != 404 {
			t.Errorf("DELETE cleared permissions: %s, want 404", r)
		}
		if c, err := amqp.Dial(tg.amqpURLFor(u, u, vh)); err == nil {
			c.Close()
			t.Errorf("AMQP login to %s after clearing permissions accepted", vh)
		}
		if r := tg.doAs(u, u, "GET", "/api/queues/"+esc(vh), nil); r.status != 401 {
			t.Errorf("GET queues after clearing permissions: %s, want 401", r)
		}
		if r := tg.do("PUT", "/api/permissions/"+esc(vh)+"/"+esc(mgmtName("nouser")), want); r.status != 400 && r.status != 404 {
			t.Errorf("PUT permissions of unknown user: %s, want 400/404", r)
		}
	})
}

func TestMgmtPolicies(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		def := rabbithole.PolicyDefinition{"dead-letter-exchange": "pol-dlx", "max-length": 10}
		pol := rabbithole.Policy{Pattern: "^pol-", ApplyTo: "queues", Priority: 3, Definition: def}
		if _, err := tg.rh.PutPolicy(vh, "p1", pol); err != nil {
			t.Fatalf("PUT policy: %v", err)
		}
		p, err := tg.rh.GetPolicy(vh, "p1")
		if err != nil || p.Name != "p1" || p.Vhost != vh || p.Pattern != "^pol-" || p.ApplyTo != "queues" || p.Priority != 3 || !jsonEqual(p.Definition, def) {
			t.Errorf("GET policy = %+v, %v", p, err)
		}
		if ps, err := tg.rh.ListPolicies(); err != nil || !slices.ContainsFunc(ps, func(p rabbithole.Policy) bool { return p.Vhost == vh && p.Name == "p1" }) {
			t.Errorf("all policies: p1 missing (%v)", err)
		}
		if ps, err := tg.rh.ListPoliciesIn(vh); err != nil || len(ps) != 1 || ps[0].Name != "p1" {
			t.Errorf("policies of vhost = %+v, %v", ps, err)
		}

		// Effect: the policy applies to pol-q, not to other-q.
		tg.declareQueue(vh, "pol-q", nil)
		tg.declareQueue(vh, "other-q", nil)
		tg.declareQueue(vh, "pol-dlq", nil)
		if _, err := tg.rh.DeclareExchange(vh, "pol-dlx", rabbithole.ExchangeSettings{Type: "fanout"}); err != nil {
			t.Fatal(err)
		}
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/pol-dlx/q/pol-dlq", map[string]any{"routing_key": ""}, 201)
		q := tg.waitQueueField(vh, "pol-q", "policy", "p1")
		if !jsonEqual(q["effective_policy_definition"], def) {
			t.Errorf("pol-q effective_policy_definition = %s, want %s", jsonString(q["effective_policy_definition"]), jsonString(def))
		}
		if q := tg.queueInfo(vh, "other-q"); q["policy"] != nil {
			t.Errorf("other-q policy = %v, want null", q["policy"])
		}
		tg.publishAPI(vh, "", "pol-q", "to-dead-letter", nil)
		tg.apiGet(vh, "pol-q", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
		eventually(func() bool { return tg.amqpCount(t, vh, "pol-dlq") == 1 }) // published by pol-q's flusher (issue 12)
		if d, ok := tg.amqpGet(t, vh, "pol-dlq"); !ok || string(d.Body) != "to-dead-letter" {
			t.Errorf("policy dead-letter-exchange: pol-dlq got %v %q, want the rejected message", ok, d.Body)
		}

		if _, err := tg.rh.DeletePolicy(vh, "p1"); err != nil {
			t.Fatal(err)
		}
		if r := tg.do("GET", "/api/policies/"+esc(vh)+"/p1", nil); r.status != 404 {
			t.Errorf("GET deleted policy: %s, want 404", r)
		}
		if r := tg.do("DELETE", "/api/policies/"+esc(vh)+"/p1", nil); r.status != 404 {
			t.Errorf("DELETE deleted policy: %s, want 404", r)
		}
		tg.waitQueueField(vh, "pol-q", "policy", nil)
		tg.publishAPI(vh, "", "pol-q", "not-dead-lettered", nil)
		tg.apiGet(vh, "pol-q", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
		if n := tg.amqpCount(t, vh, "pol-dlq"); n != 0 {
			t.Errorf("after deleting the policy: pol-dlq has %d messages, want 0", n)
		}
	})
}

func TestMgmtDefinitions(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		tg.declareQueue(vh, "dq", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 3}})
		tg.must("PUT", "/api/exchanges/"+esc(vh)+"/dx", map[string]any{"type": "topic", "durable": true}, 201, 204)
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/dx/q/dq", map[string]any{"routing_key": "a.#"}, 201)
		tg.must("PUT", "/api/policies/"+esc(vh)+"/dp", map[string]any{"pattern": "^dq$", "definition": map[string]any{"message-ttl": 60000}, "apply-to": "queues"}, 201, 204)

		all, err := tg.rh.ListDefinitions()
		if err != nil {
			t.Fatal(err)
		}
		if all.Queues == nil || !slices.ContainsFunc(*all.Queues, func(q rabbithole.QueueInfo) bool { return q.Vhost == vh && q.Name == "dq" }) {
			t.Errorf("GET /api/definitions: queue dq of %s missing", vh)
		}
		if all.Vhosts == nil || !slices.ContainsFunc(*all.Vhosts, func(v rabbithole.VhostInfo) bool { return v.Name == vh }) {
			t.Errorf("GET /api/definitions: vhost %s missing", vh)
		}
		if all.Users == nil || !slices.ContainsFunc(*all.Users, func(u rabbithole.UserInfo) bool { return u.Name == tg.user }) {
			t.Errorf("GET /api/definitions: user %s missing", tg.user)
		}
		// Export one vhost, import it into another.
		exp, err := tg.rh.ListVhostDefinitions(vh)
		if err != nil {
			t.Fatal(err)
		}
		if exp.Queues == nil || len(*exp.Queues) != 1 || exp.Exchanges == nil || len(*exp.Exchanges) != 1 || exp.Bindings == nil || len(*exp.Bindings) != 1 || exp.Policies == nil || len(*exp.Policies) != 1 {
			t.Fatalf("vhost definitions = %s; want 1 queue, exchange, binding, policy", jsonString(exp))
		}
		vh2 := tg.freshVhost(t)
		raw := tg.must("GET", "/api/definitions/"+esc(vh), nil, 200).body
		tg.must("POST", "/api/definitions/"+esc(vh2), raw, 200, 201, 204)
		q := tg.queueInfo(vh2, "dq")
		if q["durable"] != true || !jsonEqual(q["arguments"], map[string]any{"x-max-length": 3}) {
			t.Errorf("imported queue = durable %v arguments %v", q["durable"], q["arguments"])
		}
		if bs, err := tg.rh.ListQueueBindingsBetween(vh2, "dx", "dq"); err != nil || len(bs) != 1 || bs[0].RoutingKey != "a.#" {
			t.Errorf("imported binding = %+v, %v", bs, err)
		}
		if p, err := tg.rh.GetPolicy(vh2, "dp"); err != nil || p.Pattern != "^dq$" {
			t.Errorf("imported policy = %+v, %v", p, err)
		}
		// Full import: a new vhost, user and permission.
		vh3, u3 := mgmtName("vh"), mgmtName("u")
		t.Cleanup(func() { tg.do("DELETE", "/api/vhosts/"+esc(vh3), nil); tg.do("DELETE", "/api/users/"+esc(u3), nil) })
		doc := map[string]any{
			"users":       []any{map[string]any{"name": u3, "password_hash": rabbithole.Base64EncodedSaltedPasswordHashSHA256("pw-3"), "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "management"}},
			"vhosts":      []any{map[string]any{"name": vh3}},
			"permissions": []any{map[string]any{"user": u3, "vhost": vh3, "configure": ".*", "write": ".*", "read": ".*"}},
			"queues":      []any{map[string]any{"name": "iq", "vhost": vh3, "durable": true, "auto_delete": false, "arguments": map[string]any{}}},
			"exchanges":   []any{},
			"bindings":    []any{},
			"policies":    []any{},
		}
		tg.must("POST", "/api/definitions", doc, 200, 201, 204)
		c, err := amqp.Dial(tg.amqpURLFor(u3, "pw-3", vh3))
		if err != nil {
			t.Fatalf("AMQP login as imported user to imported vhost: %v", err)
		}
		ich, err := c.Channel()
		if err == nil {
			_, err = ich.QueueDeclarePassive("iq", true, false, false, false, nil)
		}
		c.Close()
		if err != nil {
			t.Errorf("imported queue iq, passive declare as %s: %v", u3, err)
		}
		// RabbitMQ gives the importing user full permissions on a vhost
		// the import creates (as for PUT /api/vhosts).
		if p, _ := tg.getJSON("/api/vhosts/" + esc(vh3) + "/permissions").([]any); len(findBy(p, "user", tg.user)) != 1 || len(findBy(p, "user", u3)) != 1 {
			t.Errorf("permissions of imported vhost = %s; want %s (imported) and %s (the importing user)", jsonString(p), u3, tg.user)
		}
	})
}

func TestMgmtHealthChecks(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		if s, err := tg.rh.HealthCheckAlarms(); err != nil || s.Status != "ok" {
			t.Errorf("health/checks/alarms = %+v, %v", s, err)
		}
		for _, p := range []string{"/api/health/checks/alarms", "/api/health/checks/local-alarms", "/api/aliveness-test/%2F", "/api/aliveness-test/" + esc(vh)} {
			r := tg.do("GET", p, nil)
			if r.status != 200 || !jsonEqual(r.json(t), map[string]any{"status": "ok"}) {
				t.Errorf("%s, want 200 {\"status\":\"ok\"}", r)
			}
		}
		if r := tg.do("GET", "/api/aliveness-test/"+esc(mgmtName("nope")), nil); r.status != 404 {
			t.Errorf("%s, want 404", r)
		}
		// The aliveness test leaves no message behind.
		if n := tg.amqpCount(t, vh, "aliveness-test"); n > 0 {
			t.Errorf("aliveness-test queue holds %d messages", n)
		}
	})
}

func TestMgmtShovelMove(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		if tg.isRabbit() && tg.do("GET", "/api/shovels", nil).status == 404 {
			t.Skip("the reference RabbitMQ has no rabbitmq_shovel_management plugin (CI enables management and prometheus only)")
		}
		vh := tg.freshVhost(t)
		tg.declareQueue(vh, "mv-src", nil)
		tg.declareQueue(vh, "mv-dst", nil)
		ch := tg.channel(t, vh)
		for i := 0; i < 5; i++ {
			publish(t, ch, "", "mv-src", amqp.Publishing{Body: []byte{'0' + byte(i)}})
		}
		uri := "amqp:///" + esc(vh)
		tg.must("PUT", "/api/parameters/shovel/"+esc(vh)+"/mv", map[string]any{"value": map[string]any{
			"src-uri": uri, "src-queue": "mv-src", "dest-uri": uri, "dest-queue": "mv-dst", "src-delete-after": "queue-length",
		}}, 201, 204)
		if !eventually(func() bool { return tg.amqpCount(t, vh, "mv-dst") == 5 }) {
			t.Fatalf("after the move: mv-src %d mv-dst %d, want 0 and 5", tg.amqpCount(t, vh, "mv-src"), tg.amqpCount(t, vh, "mv-dst"))
		}
		if n := tg.amqpCount(t, vh, "mv-src"); n != 0 {
			t.Errorf("mv-src after the move: %d messages", n)
		}
		if got := getBodies(t, tg.channel(t, vh), "mv-dst"); strings.Join(got, "") != "01234" {
			t.Errorf("moved messages = %q, want 0..4 in order", got)
		}
		if !eventually(func() bool { return tg.do("GET", "/api/parameters/shovel/"+esc(vh)+"/mv", nil).status == 404 }) {
			t.Errorf("shovel parameter still there after the move: %s", tg.do("GET", "/api/parameters/shovel/"+esc(vh)+"/mv", nil))
		}
	})
}

func TestMgmtTagRules(t *testing.T) {
	t.Parallel()
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		tg.declareQueue(vh, "secret-q", nil)
		mon := tg.newUser(t, "mon", "monitoring")
		mgr := tg.newUser(t, "mgr", "management")
		none := tg.newUser(t, "none", "")
		cn := mgmtName("conn")
		if _, err := tg.dial(t, vh, cn).Channel(); err != nil {
			t.Fatal(err)
		}

		// monitoring sees every connection, management only its own.
		if c := tg.findConn(mon, mon, cn); c == nil {
			t.Errorf("monitoring user does not see guest's connection %q", cn)
		}
		r := tg.doAs(mgr, mgr, "GET", "/api/connections", nil)
		if r.status != 200 {
			t.Errorf("management user GET connections: %s", r)
		} else if arr, _ := r.json(t).([]any); len(arr) != 0 {
			t.Errorf("management user sees %d connections of others, want 0", len(arr))
		}
		// management without permissions on vh: cannot see its queues.
		r = tg.doAs(mgr, mgr, "GET", "/api/queues/"+esc(vh), nil)
		if r.status != 401 || r.errorBody() != "not_authorised: User not authorised to access virtual host" {
			t.Errorf("management user GET queues of vhost without permissions: %s, want 401 not_authorised", r)
		}
		r = tg.doAs(mgr, mgr, "GET", "/api/queues/"+esc(vh)+"/secret-q", nil)
		if r.status != 401 {
			t.Errorf("management user GET queue of vhost without permissions: %s, want 401", r)
		}
		r = tg.doAs(mgr, mgr, "GET", "/api/queues", nil)
		if r.status != 200 || len(findBy(r.json(t), "vhost", vh)) != 0 {
			t.Errorf("management user GET all queues: %s, want 200 without %s's", r, vh)
		}
		r = tg.doAs(mgr, mgr, "GET", "/api/users", nil)
		if r.status != 401 || r.errorBody() != "not_authorised: Not administrator user" {
			t.Errorf("management user GET users: %s, want 401 Not administrator user", r)
		}
		// monitoring sees every vhost and channel, but (RabbitMQ 3.10.8)
		// not the queues of a vhost it has no permissions on.
		r = tg.doAs(mon, mon, "GET", "/api/vhosts", nil)
		if r.status != 200 || len(findBy(r.json(t), "name", vh)) != 1 {
			t.Errorf("monitoring user GET vhosts: %s, want %s listed", r, vh)
		}
		// RabbitMQ lists a new channel once its stats are collected (up to
		// 5 s): poll.
		hasChannel := func(r mgmtResp) bool {
			arr, _ := r.json(t).([]any)
			return r.status == 200 && slices.ContainsFunc(arr, func(e any) bool {
				return dig(e, "connection_details", "peer_port") != nil && dig(e, "vhost") == vh
			})
		}
		if !testutil.Until(15*time.Second, func() bool {
			r = tg.doAs(mon, mon, "GET", "/api/channels", nil)
			return hasChannel(r)
		}) {
			t.Errorf("monitoring user GET channels: %s, want guest's channel on %s", r, vh)
		}
		r = tg.doAs(mon, mon, "GET", "/api/queues", nil)
		if r.status != 200 || len(findBy(r.json(t), "vhost", vh)) != 0 {
			t.Errorf("monitoring user GET all queues: %s, want 200 without %s's queues", r, vh)
		}
		// No tags: 401.
		for _, p := range []string{"/api/overview", "/api/whoami", "/api/queues"} {
			r := tg.doAs(none, none, "GET", p, nil)
			if r.status != 401 || r.errorBody() != "not_authorised: Not management user" {
				t.Errorf("user without tags %s, want 401 Not management user", r)
			}
		}
		// Once permitted, management sees the vhost.
		tg.permit(vh, mgr)
		r = tg.doAs(mgr, mgr, "GET", "/api/queues/"+esc(vh), nil)
		if r.status != 200 || len(names(r.json(t))) != 1 {
			t.Errorf("permitted management user GET queues: %s", r)
		}
	})
}

// TestMgmtDeadLetters covers Warren's /api/dead-letters extension (Warren
// only: RabbitMQ has no such endpoints).
func TestMgmtDeadLetters(t *testing.T) {
	t.Parallel()
	tg := newMgmtWarren(t)
	vh := tg.freshVhost(t)
	dlxArgs := map[string]any{"durable": false, "arguments": map[string]any{"x-dead-letter-exchange": "dlx"}}
	tg.declareQueue(vh, "orders", dlxArgs)
	tg.declareQueue(vh, "orders2", dlxArgs)
	tg.declareQueue(vh, "orders.dlq", nil)
	tg.must("PUT", "/api/exchanges/"+esc(vh)+"/orders-x", map[string]any{"type": "direct"}, 201, 204)
	tg.must("PUT", "/api/exchanges/"+esc(vh)+"/dlx", map[string]any{"type": "fanout"}, 201, 204)
	tg.must("POST", "/api/bindings/"+esc(vh)+"/e/orders-x/q/orders", map[string]any{"routing_key": "new"}, 201)
	tg.must("POST", "/api/bindings/"+esc(vh)+"/e/dlx/q/orders.dlq", map[string]any{"routing_key": ""}, 201)
	ch := tg.channel(t, vh)
	publish(t, ch, "orders-x", "new", amqp.Publishing{Body: []byte("r1")})
	publish(t, ch, "orders-x", "new", amqp.Publishing{Body: []byte("r2")})
	publish(t, ch, "", "orders2", amqp.Publishing{Body: []byte("r3"), Headers: amqp.Table{"keep": "me"}})
	tg.apiGet(vh, "orders", map[string]any{"count": 2, "ackmode": "reject_requeue_false", "encoding": "auto"})
	// Each queue's flusher publishes its own dead letters (issue 12): the
	// order between two sources is set here by waiting, the positions
	// browsed below depend on it.
	if !eventually(func() bool { return tg.amqpCount(t, vh, "orders.dlq") == 2 }) {
		t.Fatalf("orders.dlq holds %d messages, want the 2 rejected from orders", tg.amqpCount(t, vh, "orders.dlq"))
	}
	tg.apiGet(vh, "orders2", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
	if !eventually(func() bool { return tg.amqpCount(t, vh, "orders.dlq") == 3 }) {
		t.Fatalf("orders.dlq holds %d messages, want 3 rejected", tg.amqpCount(t, vh, "orders.dlq"))
	}
	publish(t, ch, "orders-x", "new", amqp.Publishing{Body: []byte("e1"), Expiration: "1"})
	if !eventually(func() bool { return tg.amqpCount(t, vh, "orders.dlq") == 4 }) {
		t.Fatalf("orders.dlq holds %d messages, want 4 (3 rejected, 1 expired)", tg.amqpCount(t, vh, "orders.dlq"))
	}

	// The list, for all vhosts and for one.
	for _, p := range []string{"/api/dead-letters", "/api/dead-letters/" + esc(vh)} {
		var e map[string]any
		for _, m := range findBy(tg.getJSON(p), "name", "orders.dlq") {
			if m["vhost"] == vh {
				e = m
			}
		}
		if e == nil {
			t.Errorf("GET %s: no entry for %s/orders.dlq", p, vh)
			continue
		}
		srcs, _ := e["sources"].([]any)
		var ss []string
		for _, s := range srcs {
			ss = append(ss, s.(string))
		}
		sort.Strings(ss)
		if e["messages"] != 4.0 || e["messages_ready"] != 4.0 || e["messages_unacknowledged"] != 0.0 || e["consumers"] != 0.0 || e["sampled"] != false ||
			!slices.Equal(ss, []string{"orders", "orders2"}) ||
			!jsonEqual(e["by_reason"], map[string]any{"rejected": 3, "expired": 1}) ||
			!jsonEqual(e["by_source"], map[string]any{"orders": 3, "orders2": 1}) {
			t.Errorf("GET %s: entry = %s; want 4 messages, sources [orders orders2], by_reason rejected 3 expired 1, by_source orders 3 orders2 1", p, jsonString(e))
		}
	}
	if r := tg.do("GET", "/api/dead-letters/"+esc(mgmtName("nope")), nil); r.status != 404 {
		t.Errorf("dead letters of unknown vhost: %s, want 404", r)
	}

	// Browse without consuming.
	base := "/api/dead-letters/" + esc(vh) + "/orders.dlq/messages"
	page := tg.getJSON(base + "?offset=0&limit=50")
	msgs, _ := dig(page, "messages").([]any)
	if dig(page, "total") != 4.0 || dig(page, "offset") != 0.0 || len(msgs) != 4 {
		t.Fatalf("browse = %s, want total 4 offset 0 and 4 messages", jsonString(page))
	}
	var bodies []string
	for i, m := range msgs {
		bodies = append(bodies, dig(m, "payload").(string))
		xd, _ := dig(m, "x_death").([]any)
		if dig(m, "position") != float64(i) || dig(m, "redelivered") != false || dig(m, "payload_encoding") != "string" || len(xd) != 1 ||
			dig(m, "first_death", "reason") != dig(xd[0], "reason") || dig(m, "first_death", "queue") != dig(xd[0], "queue") {
			t.Errorf("browsed message %d = %s", i, jsonString(m))
		}
		if hx, _ := dig(m, "properties", "headers", "x-death").([]any); len(hx) != 1 {
			t.Errorf("browsed message %d: properties.headers.x-death = %s", i, jsonString(hx))
		}
	}
	if !slices.Equal(bodies, []string{"r1", "r2", "r3", "e1"}) {
		t.Errorf("browsed payloads %q, want r1 r2 r3 e1", bodies)
	}
	if m := msgs[3]; dig(m, "first_death", "reason") != "expired" || dig(m, "first_death", "exchange") != "orders-x" {
		t.Errorf("expired message = %s; want first_death expired from orders-x", jsonString(m))
	}
	if p := tg.getJSON(base + "?reason=expired"); dig(p, "total") != 1.0 {
		t.Errorf("browse reason=expired: %s, want total 1", jsonString(p))
	}
	if p := tg.getJSON(base + "?source_queue=orders2"); dig(p, "total") != 1.0 || dig(p, "messages") == nil {
		t.Errorf("browse source_queue=orders2: %s, want total 1", jsonString(p))
	}
	p := tg.getJSON(base + "?offset=1&limit=2")
	pm, _ := dig(p, "messages").([]any)
	if dig(p, "total") != 4.0 || len(pm) != 2 || dig(pm[0], "position") != 1.0 || dig(pm[0], "payload") != "r2" {
		t.Errorf("browse offset 1 limit 2: %s", jsonString(p))
	}
	if n := tg.amqpCount(t, vh, "orders.dlq"); n != 4 {
		t.Errorf("after browsing: orders.dlq holds %d, want 4", n)
	}
	if ms := tg.apiGet(vh, "orders.dlq", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}); len(ms) != 1 || ms[0]["redelivered"] != false {
		t.Errorf("first DLQ message after browsing = %s; want redelivered false (browsing delivers nothing)", jsonString(ms))
	}
	if r := tg.do("GET", "/api/dead-letters/"+esc(vh)+"/nope/messages", nil); r.status != 404 {
		t.Errorf("browse unknown queue: %s, want 404", r)
	}

	// Replay one rejected message of orders: back in orders, history stripped.
	replay := func(body map[string]any) map[string]any { return dlReplay(tg, vh, "orders.dlq", body) }
	res := replay(map[string]any{"count": 1, "reason": "rejected", "source_queue": "orders"})
	if res["replayed"] != 1.0 || res["failed"] != 0.0 || res["remaining"] != 3.0 {
		t.Errorf("replay count 1 rejected from orders = %s; want replayed 1 failed 0 remaining 3", jsonString(res))
	}
	d, ok := tg.amqpGet(t, vh, "orders")
	if !ok || string(d.Body) != "r1" {
		t.Fatalf("orders after replay: %v %q, want r1", ok, d.Body)
	}
	for k := range d.Headers {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			t.Errorf("replayed r1 still has header %s (keep_history false)", k)
		}
	}
	if d.Exchange != "orders-x" || d.RoutingKey != "new" {
		t.Errorf("replayed r1 came via %q/%q, want orders-x/new (the first death's exchange and keys)", d.Exchange, d.RoutingKey)
	}
	// Replay orders2's with keep_history.
	res = replay(map[string]any{"source_queue": "orders2", "keep_history": true})
	if res["replayed"] != 1.0 || res["failed"] != 0.0 || res["remaining"] != 2.0 || res["skipped"] != 2.0 {
		t.Errorf("replay source_queue orders2 keep_history = %s; want replayed 1 skipped 2 failed 0 remaining 2", jsonString(res))
	}
	d, ok = tg.amqpGet(t, vh, "orders2")
	xd, _ := d.Headers["x-death"].([]any)
	if !ok || string(d.Body) != "r3" || len(xd) != 1 || d.Headers["keep"] != "me" {
		t.Errorf("orders2 after replay with keep_history: %v %q headers %v; want r3 with its x-death", ok, d.Body, d.Headers)
	} else if xe, _ := xd[0].(amqp.Table); xe["reason"] != "rejected" || xe["queue"] != "orders2" {
		t.Errorf("kept x-death = %v", xe)
	}
	if n := tg.amqpCount(t, vh, "orders.dlq"); n != 2 {
		t.Errorf("orders.dlq after two replays: %d, want 2", n)
	}
	// Everything else (r2 rejected, e1 expired).
	res = replay(map[string]any{})
	if res["replayed"] != 2.0 || res["remaining"] != 0.0 {
		t.Errorf("replay all = %s; want replayed 2 remaining 0", jsonString(res))
	}
	// Dead-lettering removed e1's expiration (RabbitMQ keeps it as
	// x-death original-expiration); replayed, it must not expire again.
	if got := getBodies(t, tg.channel(t, vh), "orders"); strings.Join(got, ",") != "r2,e1" {
		t.Errorf("orders after replaying all = %q, want r2,e1 (orders.dlq now holds %d)", got, tg.amqpCount(t, vh, "orders.dlq"))
	}
	if r := tg.do("POST", "/api/dead-letters/"+esc(vh)+"/nope/replay", map[string]any{}); r.status != 404 {
		t.Errorf("replay unknown queue: %s, want 404", r)
	}

	// A persistent message in a durable queue is replayed to disk.
	tg.declareQueue(vh, "dur", map[string]any{"durable": true, "arguments": map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dur.dlq"}})
	tg.declareQueue(vh, "dur.dlq", map[string]any{"durable": true})
	publish(t, ch, "", "dur", amqp.Publishing{Body: []byte("p1"), DeliveryMode: amqp.Persistent})
	tg.apiGet(vh, "dur", map[string]any{"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
	if !eventually(func() bool { return tg.amqpCount(t, vh, "dur.dlq") == 1 }) {
		t.Fatalf("dur.dlq never got the rejected message")
	}
	if dl := findBy(tg.getJSON("/api/dead-letters/"+esc(vh)), "name", "dur.dlq"); len(dl) != 1 || !jsonEqual(dl[0]["by_reason"], map[string]any{"rejected": 1}) {
		t.Errorf("dead letters list: dur.dlq entry = %s", jsonString(dl))
	}
	res = dlReplay(tg, vh, "dur.dlq", map[string]any{})
	if res["replayed"] != 1.0 || res["remaining"] != 0.0 {
		t.Errorf("replay of the persistent message = %s", jsonString(res))
	}
	tg.w.Restart()
	d, ok = tg.amqpGet(t, vh, "dur")
	if !ok || string(d.Body) != "p1" || d.DeliveryMode != amqp.Persistent {
		t.Errorf("dur after replay and a restart: %v %q mode %d, want the persistent p1", ok, d.Body, d.DeliveryMode)
	}
}

// dlReplay is POST /api/dead-letters/{vhost}/{queue}/replay.
func dlReplay(tg *mgmtTarget, vh, q string, body map[string]any) map[string]any {
	tg.t.Helper()
	r := tg.must("POST", "/api/dead-letters/"+esc(vh)+"/"+esc(q)+"/replay", body, 200)
	m, _ := r.json(tg.t).(map[string]any)
	return m
}
