package mgmt

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqpc "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

func (s *Server) exchangeRoutes() {
	s.handle("GET /api/exchanges", lvlManagement, (*call).exchanges)
	s.handle("GET /api/exchanges/{vhost}", lvlManagement, (*call).exchanges)
	s.handle("GET /api/exchanges/{vhost}/{name}", lvlManagement, (*call).exchangeGet)
	s.handle("PUT /api/exchanges/{vhost}/{name}", lvlManagement, (*call).exchangePut)
	s.handle("DELETE /api/exchanges/{vhost}/{name}", lvlManagement, (*call).exchangeDelete)
	s.handle("POST /api/exchanges/{vhost}/{name}/publish", lvlManagement, (*call).exchangePublish)
	s.handle("GET /api/exchanges/{vhost}/{name}/bindings/source", lvlManagement, (*call).exchangeBindingsSource)
	s.handle("GET /api/exchanges/{vhost}/{name}/bindings/destination", lvlManagement, (*call).exchangeBindingsDest)

	s.handle("GET /api/bindings", lvlManagement, (*call).bindings)
	s.handle("GET /api/bindings/{vhost}", lvlManagement, (*call).bindings)
	for _, kind := range []string{"q", "e"} {
		s.handle("GET /api/bindings/{vhost}/e/{source}/"+kind+"/{dest}", lvlManagement, bindingsBetween(kind))
		s.handle("POST /api/bindings/{vhost}/e/{source}/"+kind+"/{dest}", lvlManagement, bindingCreate(kind))
		s.handle("GET /api/bindings/{vhost}/e/{source}/"+kind+"/{dest}/{props}", lvlManagement, bindingGet(kind))
		s.handle("DELETE /api/bindings/{vhost}/e/{source}/"+kind+"/{dest}/{props}", lvlManagement, bindingDelete(kind))
	}
}

// exchangeName maps the API's name of the default exchange.
func exchangeName(n string) string {
	if n == "amq.default" {
		return ""
	}
	return n
}

func (c *call) exchangeJSON(v *broker.VHost, x *broker.Exchange) api.Exchange {
	args := map[string]any{}
	if x.Args != nil {
		args = broker.TableJSON(x.Args)
	}
	m := api.Exchange{Name: x.Name, VHost: v.Name, Type: x.Kind, Durable: x.Durable, AutoDelete: x.AutoDelete,
		Internal: x.Internal, Arguments: args, UserWhoPerformedAction: "rmq-internal"}
	if xc, ok := c.exchangeCounts()[[2]string{v.Name, x.Name}]; ok {
		// As RabbitMQ: message_stats once something was published to it.
		key := exchangeKey(v.Name, x.Name)
		m.MessageStats = c.statsWithRates(key, kindExchange, counters{"publish_in": xc.In, "publish_out": xc.Out}, "publish_in", "publish_out")
	}
	if pol, _ := v.ExchangePolicy(x.Name); pol != "" {
		m.Policy = pol
	}
	return m
}

func (c *call) exchanges() error {
	vs, err := c.visibleVHosts()
	if err != nil {
		return err
	}
	if err := c.parseHistory(true, false); err != nil {
		return err
	}
	list := []api.Exchange{}
	for _, v := range vs {
		for _, x := range v.Exchanges() {
			list = append(list, c.exchangeJSON(v, x))
		}
	}
	return listOf(c, list)
}

func (c *call) exchange() (*broker.VHost, *broker.Exchange, error) {
	v, err := c.vhost()
	if err != nil {
		return nil, nil, err
	}
	x := v.Exchange(exchangeName(c.pv("name")))
	if x == nil {
		return nil, nil, errNotFound
	}
	return v, x, nil
}

func (c *call) exchangeGet() error {
	v, x, err := c.exchange()
	if err != nil {
		return err
	}
	if err := c.parseHistory(false, false); err != nil {
		return err
	}
	return c.ok(api.ExchangeDetail{Exchange: c.exchangeJSON(v, x), Incoming: []any{}, Outgoing: []any{}})
}

type exchangeBody struct {
	Type       string         `json:"type"`
	Durable    rbool          `json:"durable"`
	AutoDelete rbool          `json:"auto_delete"`
	Internal   rbool          `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

func (c *call) exchangePut() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	name := c.pv("name")
	var b exchangeBody
	if err := c.decode(&b); err != nil {
		return err
	}
	if err := c.check(v, broker.Configure, "exchange", name); err != nil {
		return err
	}
	if b.Type == "" {
		return keyMissing("type")
	}
	args, err := broker.JSONTable(b.Arguments)
	if err != nil {
		return changeFailed(err)
	}
	if name == "amq.default" || strings.HasPrefix(name, "amq.") {
		return notAuthorised("Access refused.")
	}
	existed := v.Exchange(name) != nil
	if !existed {
		if err := c.checkCreateArgs(v, "exchange", name, args); err != nil {
			return err
		}
	}
	// As RabbitMQ's API: durable only when asked for.
	durable := b.Durable.or(false)
	if err := v.DeclareExchange(broker.ExchangeSpec{Name: name, Kind: b.Type, Durable: durable, AutoDelete: b.AutoDelete.or(false), Internal: b.Internal.or(false), Args: args}, false); err != nil {
		var e *amqpc.Error
		if errors.As(err, &e) && e.Code == amqpc.CommandInvalid {
			return badRequest(fmt.Sprintf("unknown exchange type '%s'", b.Type))
		}
		return amqpError(err)
	}
	return c.created(!existed)
}

func (c *call) exchangeDelete() error {
	v, x, err := c.exchange()
	if err != nil {
		return err
	}
	if err := c.check(v, broker.Configure, "exchange", x.Name); err != nil {
		return err
	}
	if err := v.DeleteExchange(x.Name, c.r.URL.Query().Get("if-unused") == "true"); err != nil {
		return amqpError(err)
	}
	return c.noContent()
}

type publishBody struct {
	Properties      map[string]any `json:"properties"`
	RoutingKey      *string        `json:"routing_key"`
	Payload         *string        `json:"payload"`
	PayloadEncoding string         `json:"payload_encoding"`
}

// exchangePublish publishes one message, as RabbitMQ's UI does, and
// replies {"routed": bool}. A persistent message routed to durable queues
// is on disk before the reply.
func (c *call) exchangePublish() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	name := exchangeName(c.pv("name"))
	var b publishBody
	if err := c.decode(&b); err != nil {
		return err
	}
	switch {
	case b.RoutingKey == nil:
		return keyMissing("routing_key")
	case b.Payload == nil:
		return keyMissing("payload")
	case b.PayloadEncoding == "":
		return keyMissing("payload_encoding")
	case b.Properties == nil:
		return keyMissing("properties")
	}
	body := []byte(*b.Payload)
	switch b.PayloadEncoding {
	case "string":
	case "base64":
		if body, err = base64.StdEncoding.DecodeString(*b.Payload); err != nil {
			return badRequestList("not_base64", *b.Payload)
		}
	default:
		return badRequestList("unsupported_encoding", b.PayloadEncoding)
	}
	props, err := propsFromJSON(b.Properties)
	if err != nil {
		return err
	}
	if !c.s.b.Check(c.user.Name, v.Name, broker.Write, displayExchange(name)) {
		// RabbitMQ's API publishes over an AMQP channel of its own and
		// answers its error as a 400.
		return badRequest("403 " + accessRefused(v.Name, "exchange", displayExchange(name), c.user.Name))
	}
	if err := c.s.b.CheckTopicPublish(c.user.Name, v, name, &broker.Message{RoutingKey: *b.RoutingKey, Props: props}); err != nil {
		e := err.(*amqpc.Error)
		return badRequest(strconv.Itoa(int(e.Code)) + " " + e.Text)
	}
	routed, err := c.s.publish(c.r.Context(), v, name, *b.RoutingKey, props, body)
	if err != nil {
		return err
	}
	return c.ok(map[string]any{"routed": routed})
}

func displayExchange(n string) string {
	if n == "" {
		return "amq.default"
	}
	return n
}

// publish routes a message as a client's basic.publish would and waits
// until it is on disk where that matters; its errors are 400s with the
// AMQP reply, as RabbitMQ's ("404 NOT_FOUND - no exchange ...").
func (s *Server) publish(ctx context.Context, v *broker.VHost, exchange, key string, props amqpc.Properties, body []byte) (bool, error) {
	m := &broker.Message{Exchange: exchange, RoutingKey: key, Props: props, Body: body}
	if props.Expiration != "" {
		ttl, err := broker.ParseExpiration(props.Expiration)
		if err != nil {
			return false, changeFailed(err)
		}
		m.TTL, m.HasTTL = ttl, true
	}
	var r broker.Router
	res, err := v.Publish(&r, exchange, m)
	if err == nil {
		s.srv.CountPublish(v.Name, exchange, res.Routed > 0)
	}
	if err != nil {
		var e *amqpc.Error
		if errors.As(err, &e) {
			return false, badRequest(strconv.Itoa(int(e.Code)) + " " + e.Text)
		}
		return false, changeFailed(err)
	}
	if res.Failed {
		return false, &apiError{Status: 500, Err: "internal_server_error", Reason: "the message could not be written to disk"}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.srv.WaitSynced(ctx, res.Durable); err != nil {
		return false, &apiError{Status: 500, Err: "internal_server_error", Reason: err.Error()}
	}
	return res.Routed > 0 && !res.Rejected, nil
}

// bindingJSON renders a binding as RabbitMQ does.
func bindingJSON(vhost string, b broker.BindingInfo) api.Binding {
	args := map[string]any{}
	if b.Args != nil {
		args = broker.TableJSON(b.Args)
	}
	dt := "exchange"
	if b.DestinationIsQueue {
		dt = "queue"
	}
	return api.Binding{Source: b.Source, VHost: vhost, Destination: b.Destination, DestinationType: dt,
		RoutingKey: b.RoutingKey, Arguments: args, PropertiesKey: propertiesKey(b.RoutingKey, b.Args)}
}

// propertiesKey identifies a binding among those between the same ends,
// exactly as RabbitMQ's: the routing key, escaped ("~" when empty), and
// for a binding with arguments "~" and their hash (propkey.go).
func propertiesKey(key string, args amqpc.Table) string {
	if len(args) == 0 {
		if key == "" {
			return "~"
		}
		return url.PathEscape(key)
	}
	return url.PathEscape(key) + "~" + argsHash(args)
}

func (c *call) bindings() error {
	vs, err := c.visibleVHosts()
	if err != nil {
		return err
	}
	list := []api.Binding{}
	for _, v := range vs {
		for _, b := range v.Bindings() {
			list = append(list, bindingJSON(v.Name, b))
		}
	}
	return listOf(c, list)
}

func (c *call) bindingsWhere(keep func(broker.BindingInfo) bool) error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	list := []api.Binding{}
	for _, b := range v.Bindings() {
		if keep(b) {
			list = append(list, bindingJSON(v.Name, b))
		}
	}
	return c.ok(list)
}

func (c *call) queueBindings() error {
	if _, _, err := c.queue(); err != nil {
		return err
	}
	name := c.pv("name")
	return c.bindingsWhere(func(b broker.BindingInfo) bool { return b.DestinationIsQueue && b.Destination == name })
}

func (c *call) exchangeBindingsSource() error {
	_, x, err := c.exchange()
	if err != nil {
		return err
	}
	return c.bindingsWhere(func(b broker.BindingInfo) bool { return b.Source == x.Name })
}

func (c *call) exchangeBindingsDest() error {
	_, x, err := c.exchange()
	if err != nil {
		return err
	}
	return c.bindingsWhere(func(b broker.BindingInfo) bool { return !b.DestinationIsQueue && b.Destination == x.Name })
}

// bindingEnds checks that both ends of /bindings/{vhost}/e/{source}/{kind}/{dest} exist.
func (c *call) bindingEnds(kind string) (*broker.VHost, string, string, error) {
	v, err := c.vhost()
	if err != nil {
		return nil, "", "", err
	}
	src, dst := exchangeName(c.pv("source")), c.pv("dest")
	notFound := func(what, name string) error {
		if c.r.Method == http.MethodPost {
			// As RabbitMQ: creating a binding names the missing end.
			return &apiError{Status: http.StatusNotFound, Err: "not_found", Reason: fmt.Sprintf("no %s '%s' in vhost '%s'", what, name, v.Name)}
		}
		return errNotFound
	}
	if v.Exchange(src) == nil {
		return nil, "", "", notFound("exchange", displayExchange(src))
	}
	if kind == "q" && v.Queue(dst) == nil {
		return nil, "", "", notFound("queue", dst)
	}
	if kind == "e" && v.Exchange(exchangeName(dst)) == nil {
		return nil, "", "", notFound("exchange", dst)
	}
	if kind == "e" {
		dst = exchangeName(dst)
	}
	return v, src, dst, nil
}

func between(kind, src, dst string) func(broker.BindingInfo) bool {
	return func(b broker.BindingInfo) bool {
		return b.Source == src && b.Destination == dst && b.DestinationIsQueue == (kind == "q")
	}
}

func bindingsBetween(kind string) handler {
	return func(c *call) error {
		_, src, dst, err := c.bindingEnds(kind)
		if err != nil {
			return err
		}
		return c.bindingsWhere(between(kind, src, dst))
	}
}

type bindingBody struct {
	RoutingKey string         `json:"routing_key"`
	Arguments  map[string]any `json:"arguments"`
}

func destKind(kind string) string {
	if kind == "q" {
		return "queue"
	}
	return "exchange"
}

func bindingCreate(kind string) handler {
	return func(c *call) error {
		v, src, dst, err := c.bindingEnds(kind)
		if err != nil {
			return err
		}
		var b bindingBody
		if err := c.decode(&b); err != nil {
			return err
		}
		args, err := broker.JSONTable(b.Arguments)
		if err != nil {
			return changeFailed(err)
		}
		if err := c.check(v, broker.Write, destKind(kind), dst); err != nil {
			return err
		}
		if err := c.check(v, broker.Read, "exchange", displayExchange(src)); err != nil {
			return err
		}
		if err := c.s.b.CheckTopicBind(c.user.Name, v, src, b.RoutingKey); err != nil {
			return amqpError(err)
		}
		if err := v.Bind(src, dst, kind == "e", b.RoutingKey, args, 0); err != nil {
			return amqpError(err)
		}
		// RabbitMQ answers 201 with the new binding's location.
		loc := fmt.Sprintf("/api/bindings/%s/e/%s/%s/%s/%s", url.PathEscape(v.Name), url.PathEscape(displayExchange(src)), kind,
			url.PathEscape(dst), url.PathEscape(propertiesKey(b.RoutingKey, args)))
		c.w.Header().Set("Location", loc)
		c.w.WriteHeader(201)
		return nil
	}
}

func (c *call) findBinding(kind string) (*broker.VHost, broker.BindingInfo, error) {
	v, src, dst, err := c.bindingEnds(kind)
	if err != nil {
		return nil, broker.BindingInfo{}, err
	}
	props := c.pv("props")
	for _, b := range v.Bindings() {
		if between(kind, src, dst)(b) {
			pk, _ := url.PathUnescape(propertiesKey(b.RoutingKey, b.Args))
			if pk == props || propertiesKey(b.RoutingKey, b.Args) == props {
				return v, b, nil
			}
		}
	}
	return nil, broker.BindingInfo{}, errNotFound
}

func bindingGet(kind string) handler {
	return func(c *call) error {
		v, b, err := c.findBinding(kind)
		if err != nil {
			return err
		}
		return c.ok(bindingJSON(v.Name, b))
	}
}

func bindingDelete(kind string) handler {
	return func(c *call) error {
		v, b, err := c.findBinding(kind)
		if err != nil {
			return err
		}
		if err := c.check(v, broker.Write, destKind(kind), displayExchange(b.Destination)); err != nil {
			return err
		}
		// As a binding's creation: read on its source too.
		if err := c.check(v, broker.Read, "exchange", displayExchange(b.Source)); err != nil {
			return err
		}
		if err := c.s.b.CheckTopicBind(c.user.Name, v, b.Source, b.RoutingKey); err != nil {
			return amqpError(err)
		}
		if err := v.Unbind(b.Source, b.Destination, kind == "e", b.RoutingKey, b.Args, 0); err != nil {
			return amqpError(err)
		}
		return c.noContent()
	}
}
