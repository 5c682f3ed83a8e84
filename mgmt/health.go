package mgmt

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/broker"
)

// Health checks, as RabbitMQ's /api/health/checks/* and aliveness-test:
// 200 {"status":"ok",...} when the check passes, 503 {"status":"failed",
// "reason":...} when it does not. Any management user may run them.

func (s *Server) healthRoutes() {
	s.handle("GET /api/health/checks/alarms", lvlManagement, (*call).healthAlarms)
	s.handle("GET /api/health/checks/local-alarms", lvlManagement, (*call).healthAlarms)
	s.handle("GET /api/health/checks/virtual-hosts", lvlManagement, func(c *call) error {
		// Warren's vhosts are never down: they live in the one process.
		return c.ok(map[string]any{"status": "ok"})
	})
	for _, name := range []string{"node-is-quorum-critical", "node-is-mirror-sync-critical"} {
		s.handle("GET /api/health/checks/"+name, lvlManagement, func(c *call) error {
			return c.ok(map[string]any{"status": "ok", "reason": "single node cluster"})
		})
	}
	s.handle("GET /api/health/checks/port-listener/{port}", lvlManagement, (*call).healthPort)
	s.handle("GET /api/health/checks/protocol-listener/{protocol}", lvlManagement, (*call).healthProtocol)
	s.handle("GET /api/health/checks/certificate-expiration/{within}/{unit}", lvlManagement, (*call).healthCertificates)
	s.handle("GET /api/aliveness-test/{vhost}", lvlManagement, (*call).aliveness)
}

// listenerInfo is one of the node's listeners, named by RabbitMQ's
// protocol names.
type listenerInfo struct {
	proto string
	addr  net.Addr
}

// listeners returns the AMQP, AMQPS and HTTP listeners that are up.
func (s *Server) listeners() []listenerInfo {
	var ls []listenerInfo
	if a := s.srv.Addr(); a != nil {
		ls = append(ls, listenerInfo{"amqp", a})
	}
	if a := s.srv.TLSAddr(); a != nil {
		ls = append(ls, listenerInfo{"amqp/ssl", a})
	}
	if a := s.Addr(); a != nil {
		ls = append(ls, listenerInfo{"http", a})
	}
	return ls
}

func (c *call) healthUnavailable(body map[string]any) error {
	body["status"] = "failed"
	c.s.writeJSON(c.w, http.StatusServiceUnavailable, body)
	return nil
}

// healthAlarms is 200 {"status":"ok"} without alarms, else 503 with the
// alarms, as RabbitMQ.
func (c *call) healthAlarms() error {
	alarms := c.s.srv.Alarms()
	if len(alarms) == 0 {
		return c.ok(map[string]any{"status": "ok"})
	}
	var list []any
	for _, a := range alarms {
		res := "memory"
		if a == "disk" {
			res = "disk"
		}
		list = append(list, map[string]any{"node": c.s.node, "resource": res})
	}
	return c.healthUnavailable(map[string]any{"reason": "resource alarm(s) in effect in the cluster", "alarms": list})
}

func (c *call) healthPort() error {
	port, err := strconv.ParseInt(c.pv("port"), 10, 64)
	if err != nil {
		return badRequest("Invalid port")
	}
	ports := []int64{}
	for _, l := range c.s.listeners() {
		p, _ := strconv.ParseInt(portOf(l.addr), 10, 64)
		if p == port {
			return c.ok(map[string]any{"status": "ok", "port": port})
		}
		ports = append(ports, p)
	}
	return c.healthUnavailable(map[string]any{"reason": "No active listener", "missing": port, "ports": ports})
}

// protocolAliases are the other names RabbitMQ accepts for the protocols
// of its listeners (lowercased).
var protocolAliases = map[string]string{
	"amqp091": "amqp", "amqp0.9.1": "amqp", "amqp0-9-1": "amqp", "amqp0_9_1": "amqp",
	"amqp10": "amqp", "amqp1.0": "amqp", "amqp1-0": "amqp", "amqp1_0": "amqp",
	"amqps": "amqp/ssl",
	"http1": "http", "http1.1": "http", "http_api": "http", "management": "http", "management_ui": "http", "ui": "http",
	"cli": "clustering", "distribution": "clustering",
	"mqtt3.1": "mqtt", "mqtt3.1.1": "mqtt", "mqtt31": "mqtt", "mqtt311": "mqtt", "mqtt3_1": "mqtt", "mqtt3_1_1": "mqtt",
	"mqtts": "mqtt/ssl", "mqtt+tls": "mqtt/ssl", "mqtt+ssl": "mqtt/ssl",
	"stomp1.0": "stomp", "stomp1.1": "stomp", "stomp1.2": "stomp", "stomp10": "stomp", "stomp11": "stomp", "stomp12": "stomp",
	"stomp1_0": "stomp", "stomp1_1": "stomp", "stomp1_2": "stomp",
	"stomps": "stomp/ssl", "stomp+tls": "stomp/ssl", "stomp+ssl": "stomp/ssl",
	"webmqtt": "http/web-mqtt", "web-mqtt": "http/web-mqtt", "web_mqtt": "http/web-mqtt",
	"webmqtt/tls": "https/web-mqtt", "web-mqtt/tls": "https/web-mqtt", "webmqtt/ssl": "https/web-mqtt", "web-mqtt/ssl": "https/web-mqtt",
	"webstomp": "http/web-stomp", "web-stomp": "http/web-stomp", "web_stomp": "http/web-stomp",
	"webstomp/tls": "https/web-stomp", "web-stomp/tls": "https/web-stomp", "webstomp/ssl": "https/web-stomp", "web-stomp/ssl": "https/web-stomp",
}

// healthProtocol checks for a listener of a protocol. Warren serves
// /metrics on its HTTP listener, so http/prometheus is up with it.
func (c *call) healthProtocol() error {
	want := strings.ToLower(c.pv("protocol"))
	if a, ok := protocolAliases[want]; ok {
		want = a
	}
	protos := []string{}
	for _, l := range c.s.listeners() {
		protos = append(protos, l.proto)
		if l.proto == "http" {
			protos = append(protos, "http/prometheus")
		}
	}
	if slices.Contains(protos, want) {
		return c.ok(map[string]any{"status": "ok", "protocol": want})
	}
	return c.healthUnavailable(map[string]any{"reason": "No active listener", "missing": want, "protocols": protos})
}

// healthCertificates fails when a certificate of the AMQPS listener
// expires within the given time (RabbitMQ's units: a month is 365/12
// days), or is not yet valid.
func (c *call) healthCertificates() error {
	n, err := strconv.ParseInt(c.pv("within"), 10, 64)
	if err != nil {
		return badRequest("Invalid expiration value.")
	}
	var unit float64
	switch strings.ToLower(c.pv("unit")) {
	case "days":
		unit = 86400
	case "weeks":
		unit = 7 * 86400
	case "months":
		unit = 86400 * 365 / 12
	case "years":
		unit = 365 * 86400
	default:
		return badRequest("Time unit not recognised. Supported units: days, weeks, months, years.")
	}
	now := time.Now().UTC()
	deadline := now.Add(time.Duration(float64(n) * unit * float64(time.Second)))
	cfg := c.s.srv.Config()
	addr := c.s.srv.TLSAddr()
	if cfg.TLS == nil || addr == nil {
		return c.ok(map[string]any{"status": "ok"})
	}
	var expiring []any
	for _, cert := range cfg.TLS.Certificates {
		for _, der := range cert.Certificate {
			x, err := x509.ParseCertificate(der)
			switch {
			case err != nil:
				expiring = append(expiring, map[string]any{"error": err.Error()})
			case x.NotBefore.After(now):
				expiring = append(expiring, map[string]any{"error": "Certificate is not yet valid"})
			case x.NotAfter.Before(deadline):
				t := x.NotAfter.UTC()
				expiring = append(expiring, fmt.Sprintf("%d-%02d-%02d %d:%02d:%02d", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second()))
			}
		}
	}
	if len(expiring) == 0 {
		return c.ok(map[string]any{"status": "ok"})
	}
	l := listener(c.s.node, "amqp/ssl", addr)
	return c.healthUnavailable(map[string]any{"reason": "Certificates expiring", "expired": []any{map[string]any{
		"node": c.s.node, "protocol": "amqp/ssl", "interface": l.IPAddress, "port": l.Port,
		"certfile": cfg.TLSCertFile, "cacertfile": nil,
		"certfile_expires_on": expiring, "cacertfile_expires_on": []any{},
	}}})
}

// aliveness declares the queue aliveness-test in the vhost, publishes a
// message to it and gets it back, as RabbitMQ, with the user's
// permissions: access to the vhost, configure on the queue, write on the
// default exchange and read on the queue.
func (c *call) aliveness() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	b, user := c.s.b, c.user.Name
	switch {
	case !b.CanAccessVHost(user, v.Name) && c.admin():
		return notAuthorised("Access refused.")
	case !b.CanAccessVHost(user, v.Name):
		return notAuthorised("User not authorised to access virtual host")
	}
	refused := func(kind, name string) error {
		return notAuthorised(fmt.Sprintf("ACCESS_REFUSED - access to %s '%s' in vhost '%s' refused for user '%s'", kind, name, v.Name, user))
	}
	const qname = "aliveness-test"
	if !b.Check(user, v.Name, broker.Configure, qname) {
		return refused("queue", qname)
	}
	if _, _, _, err := v.DeclareQueue(broker.QueueSpec{Name: qname, Durable: false}, false); err != nil {
		return c.failed(err)
	}
	q := v.Queue(qname)
	if q == nil {
		return c.failed(errAliveness)
	}
	if !b.Check(user, v.Name, broker.Write, "amq.default") {
		return refused("exchange", "amq.default")
	}
	m := &broker.Message{RoutingKey: qname, Body: []byte("test_message")}
	var r broker.Router
	if _, err := v.Publish(&r, "", m); err != nil {
		return c.failed(err)
	}
	if !b.Check(user, v.Name, broker.Read, qname) {
		return refused("queue", qname)
	}
	d, _, ok := q.Get(true)
	if !ok || string(d.Msg.Body) != "test_message" {
		return c.failed(errAliveness)
	}
	return c.ok(map[string]any{"status": "ok"})
}

var errAliveness = &apiError{Status: http.StatusServiceUnavailable, Err: "failed", Reason: "aliveness test failed"}
