package mgmt

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/warrenmq/warren/broker"
)

// Moving messages with the dynamic shovel parameter that RabbitMQ's UI
// uses ("Move messages"): PUT /api/parameters/shovel/{vhost}/{name}. Within
// one Warren the shovel runs in-process on top of transfer, so each
// message is acked from the source only once the destination has it. With
// src-delete-after "queue-length" (the UI's choice) or a number it stops
// after that many messages and deletes its parameter, as RabbitMQ; with
// "never" it keeps moving until the parameter is deleted.

type shovelKey struct{ vhost, name string }

type shovel struct {
	vhost, name string
	value       map[string]any
	srcQueue    string
	destQueue   string
	destX       string
	destKey     *string
	limit       int // -1: queue-length at start; 0: never stop
	cancel      context.CancelFunc
	started     time.Time
	moved       int
	state       string
	lastErr     string
}

func (s *Server) shovelRoutes() {
	s.handle("GET /api/parameters/shovel", lvlPolicymaker, (*call).shovelParams)
	s.handle("GET /api/parameters/shovel/{vhost}", lvlPolicymaker, (*call).shovelParams)
	s.handle("GET /api/parameters/shovel/{vhost}/{name}", lvlPolicymaker, (*call).shovelParamGet)
	s.handle("PUT /api/parameters/shovel/{vhost}/{name}", lvlPolicymaker, (*call).shovelPut)
	s.handle("DELETE /api/parameters/shovel/{vhost}/{name}", lvlPolicymaker, (*call).shovelDelete)
	s.handle("GET /api/shovels", lvlManagement, (*call).shovelStatus)
	s.handle("GET /api/shovels/{vhost}", lvlManagement, (*call).shovelStatus)
}

func (sh *shovel) paramJSON() map[string]any {
	return map[string]any{"vhost": sh.vhost, "component": "shovel", "name": sh.name, "value": sh.value}
}

func (s *Server) shovelList(vhost string) []*shovel {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*shovel
	for k, sh := range s.shovels {
		if vhost == "" || k.vhost == vhost {
			out = append(out, sh)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].vhost+"\x00"+out[i].name < out[j].vhost+"\x00"+out[j].name })
	return out
}

func (c *call) shovelParams() error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []map[string]any{}
	for _, sh := range c.s.shovelList(vh) {
		if c.canSee(sh.vhost) {
			list = append(list, sh.paramJSON())
		}
	}
	return c.ok(list)
}

func (c *call) shovelParamGet() error {
	if _, err := c.vhost(); err != nil {
		return err
	}
	c.s.mu.Lock()
	sh := c.s.shovels[shovelKey{c.pv("vhost"), c.pv("name")}]
	c.s.mu.Unlock()
	if sh == nil {
		return errNotFound
	}
	return c.ok(sh.paramJSON())
}

func (c *call) shovelStatus() error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []map[string]any{}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for k, sh := range c.s.shovels {
		if vh != "" && k.vhost != vh || !c.canSee(k.vhost) {
			continue
		}
		m := map[string]any{"node": c.s.node, "name": sh.name, "vhost": sh.vhost, "type": "dynamic", "state": sh.state,
			"timestamp": sh.started.Format("2006-01-02 15:04:05"), "src_protocol": "amqp091", "dest_protocol": "amqp091",
			"src_uri": sh.value["src-uri"], "dest_uri": sh.value["dest-uri"], "src_queue": sh.srcQueue, "messages_moved": sh.moved}
		if sh.destQueue != "" {
			m["dest_queue"] = sh.destQueue
		} else {
			m["dest_exchange"] = sh.destX
		}
		if sh.lastErr != "" {
			m["reason"] = sh.lastErr
		}
		list = append(list, m)
	}
	sort.Slice(list, func(i, j int) bool { return fmt.Sprint(list[i]["name"]) < fmt.Sprint(list[j]["name"]) })
	return c.ok(list)
}

// uriVHost returns the vhost an amqp URI names ("/" when it names none)
// and whether it points at this broker (no host, or a local one).
func uriVHost(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "amqp" && u.Scheme != "amqps" {
		return "", false
	}
	vh := "/"
	if p := strings.TrimPrefix(u.EscapedPath(), "/"); p != "" {
		if vh, err = url.PathUnescape(p); err != nil {
			return "", false
		}
	}
	switch h := u.Hostname(); h {
	case "", "localhost", "127.0.0.1", "::1":
		return vh, true
	}
	return vh, false
}

func (c *call) shovelPut() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	name := c.pv("name")
	var b struct {
		Value map[string]any `json:"value"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	if b.Value == nil {
		return keyMissing("value")
	}
	sh, src, err := parseShovel(v, name, b.Value)
	if err != nil {
		return err
	}
	// RabbitMQ's dynamic shovel (a plugin) checks only that the user may
	// use the vhost; Warren asks what a client moving the messages would
	// need: read on the source queue, write on the destination exchange.
	if err := c.checkChannel(v, broker.Read, "queue", sh.srcQueue); err != nil {
		return err
	}
	exchange := sh.destX
	if sh.destQueue != "" {
		exchange = ""
	}
	if err := c.checkChannel(v, broker.Write, "exchange", displayExchange(exchange)); err != nil {
		return err
	}
	// Kept, so that the move resumes after a restart, as RabbitMQ's
	// dynamic shovels do.
	if err := c.s.b.SetParameter(v.Name, "shovel", name, b.Value); err != nil {
		return amqpError(err)
	}
	old, err := c.s.startShovel(v, src, sh)
	if err != nil {
		return err
	}
	return c.created(old == nil)
}

// parseShovel reads a shovel parameter's value: a move between two queues
// (or to an exchange) of vhost v.
func parseShovel(v *broker.VHost, name string, value map[string]any) (*shovel, *broker.Queue, error) {
	str := func(k string) string { s, _ := value[k].(string); return s }
	sh := &shovel{vhost: v.Name, name: name, value: value, srcQueue: str("src-queue"), destQueue: str("dest-queue"),
		destX: str("dest-exchange"), state: "running", started: time.Now()}
	if k, ok := value["dest-exchange-key"].(string); ok {
		sh.destKey = &k
	}
	validation := func(msg string) (*shovel, *broker.Queue, error) {
		return nil, nil, badRequest("Validation failed\n\n" + msg + "\n")
	}
	for _, k := range []string{"src-uri", "dest-uri"} {
		vh, local := uriVHost(str(k))
		if !local {
			return validation(fmt.Sprintf("%s: only amqp:// URIs of this Warren are supported (got \"%s\")", k, str(k)))
		}
		if vh != v.Name {
			return validation(fmt.Sprintf("%s: moves across vhosts are not supported (\"%s\" is not vhost '%s')", k, str(k), v.Name))
		}
	}
	switch {
	case sh.srcQueue == "":
		return validation("src-queue is required (src-exchange is not supported)")
	case sh.destQueue == "" && sh.destX == "" && value["dest-exchange"] == nil:
		return validation("dest-queue or dest-exchange is required")
	}
	switch d := value["src-delete-after"].(type) {
	case nil:
		sh.limit = 0
	case string:
		switch d {
		case "queue-length":
			sh.limit = -1
		case "never":
			sh.limit = 0
		default:
			return validation(fmt.Sprintf("src-delete-after: \"%s\" is not \"queue-length\", \"never\" or a number", d))
		}
	default:
		n, ok := jsonInt(d)
		if !ok || n < 0 {
			return validation("src-delete-after must be \"queue-length\", \"never\" or a non-negative integer")
		}
		sh.limit = int(n)
		if n == 0 {
			sh.limit = -2 // move nothing, then delete
		}
	}
	src := v.Queue(sh.srcQueue)
	if src == nil {
		return validation(fmt.Sprintf("src-queue: no queue '%s' in vhost '%s'", sh.srcQueue, v.Name))
	}
	if sh.destQueue != "" && v.Queue(sh.destQueue) == nil {
		return validation(fmt.Sprintf("dest-queue: no queue '%s' in vhost '%s'", sh.destQueue, v.Name))
	}
	return sh, src, nil
}

// startShovel runs sh, replacing the shovel of the same name; it returns
// the one replaced.
func (s *Server) startShovel(v *broker.VHost, src *broker.Queue, sh *shovel) (*shovel, error) {
	key := shovelKey{v.Name, sh.name}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, &apiError{Status: 503, Err: "service_unavailable", Reason: "shutting down"}
	}
	old := s.shovels[key]
	ctx, cancel := context.WithCancel(context.Background())
	sh.cancel = cancel
	s.shovels[key] = sh
	s.wg.Add(1)
	s.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	go func() {
		defer s.wg.Done()
		s.runShovel(ctx, v, src, sh)
	}()
	return old, nil
}

// resumeShovels starts the shovel moves kept from before a restart; one
// that no longer makes sense (its queue is gone) is dropped, logged.
func (s *Server) resumeShovels() {
	for _, p := range s.b.Parameters("shovel") {
		value, _ := p.Value.(map[string]any)
		v := s.b.VHost(p.VHost)
		var err error
		if v != nil {
			var sh *shovel
			var src *broker.Queue
			if sh, src, err = parseShovel(v, p.Name, value); err == nil {
				_, err = s.startShovel(v, src, sh)
			}
		}
		if v == nil || err != nil {
			s.log.Warn("shovel not resumed; its parameter is removed", "vhost", p.VHost, "name", p.Name, "err", err)
			s.b.DeleteParameter(p.VHost, "shovel", p.Name)
			continue
		}
		s.log.Info("shovel resumed", "vhost", p.VHost, "name", p.Name)
	}
}

func (c *call) shovelDelete() error {
	if _, err := c.vhost(); err != nil {
		return err
	}
	key := shovelKey{c.pv("vhost"), c.pv("name")}
	c.s.mu.Lock()
	sh := c.s.shovels[key]
	delete(c.s.shovels, key)
	c.s.mu.Unlock()
	if sh == nil {
		return errNotFound
	}
	sh.cancel()
	c.s.b.DeleteParameter(key.vhost, "shovel", key.name)
	return c.noContent()
}

// runShovel moves messages until the shovel is done or cancelled.
func (s *Server) runShovel(ctx context.Context, v *broker.VHost, src *broker.Queue, sh *shovel) {
	exchange, key := sh.destX, sh.destQueue
	if sh.destQueue == "" && sh.destKey != nil {
		key = *sh.destKey
	}
	pick := func(m *broker.Message) (string, *broker.Message, bool) {
		out := *m
		out.Exchange = exchange
		if sh.destQueue != "" || sh.destKey != nil {
			out.RoutingKey = key
		}
		return exchange, &out, true
	}
	allowed := func(string, *broker.Message) error { return nil } // checked at PUT
	bounded, remaining := sh.limit != 0, sh.limit
	switch sh.limit {
	case -1:
		remaining, _ = src.Counts()
	case -2:
		remaining = 0
	}
	for ctx.Err() == nil && (!bounded || remaining > 0) {
		res := s.transfer(ctx, v, src, max(remaining, 0), pick, allowed)
		s.mu.Lock()
		sh.moved += res.moved
		sh.lastErr = ""
		if res.err != nil {
			sh.lastErr = res.err.Error()
		}
		s.mu.Unlock()
		remaining -= res.moved
		if res.moved > 0 {
			continue
		}
		if n, _ := src.Counts(); bounded && n == 0 && res.err == nil {
			break // queue-length: others took the rest
		}
		select {
		case <-ctx.Done():
		case <-s.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	s.mu.Lock()
	done := s.shovels[shovelKey{sh.vhost, sh.name}] == sh && ctx.Err() == nil
	if done {
		delete(s.shovels, shovelKey{sh.vhost, sh.name})
	}
	s.mu.Unlock()
	if done { // finished its job: the parameter goes, as RabbitMQ's does
		s.b.DeleteParameter(sh.vhost, "shovel", sh.name)
	}
}
