package bridge

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/warrenmq/warren/broker"
)

// Federation upstreams (issue 24), as RabbitMQ's federation plugin
// defines them: the parameters federation-upstream (one upstream) and
// federation-upstream-set (a list of upstreams with overrides), named by
// the federation-upstream, federation-upstream-set (or "all") and
// federation-upstream-pattern policy keys.

// Upstream components.
const (
	UpstreamComponent    = "federation-upstream"
	UpstreamSetComponent = "federation-upstream-set"
)

// Upstream is a federation upstream with its defaults applied
// (rabbit_federation_upstream).
type Upstream struct {
	Name           string
	URIs           []string
	Exchange       string // "" : the federated exchange's own name
	Queue          string // "" : the federated queue's own name
	ConsumerTag    string
	Prefetch       int
	ReconnectDelay time.Duration
	MaxHops        int
	Expires        int64 // ms, 0 none
	MessageTTL     int64 // ms, 0 none
	TrustUserID    bool
	AckMode        string
	CleanupNever   bool // resource-cleanup-mode never
	QueueType      string
}

// upstreamKeys are shared by an upstream and a set's element (the
// element adds "upstream", the upstream "uri").
var upstreamKeys = map[string]string{
	"exchange": "binary", "queue": "binary", "consumer-tag": "binary", "prefetch-count": "number",
	"reconnect-delay": "number", "max-hops": "number", "expires": "number", "message-ttl": "number",
	"trust-user-id": "boolean", "ack-mode": "ack", "resource-cleanup-mode": "cleanup", "ha-policy": "binary",
	"bind-nowait": "boolean", "channel-use-mode": "channel", "queue-type": "qtype",
}

// checkUpstreamTerms validates an upstream's (or a set element's) terms
// as rabbit_parameter_validation:proplist does; first is the mandatory
// key ("uri" or "upstream").
func checkUpstreamTerms(name, first string, v map[string]any) error {
	var unknown []string
	for k := range v {
		if k != first && upstreamKeys[k] == "" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		terms := make([]string, len(unknown))
		for i, k := range unknown {
			terms[i] = "{" + erl(k) + "," + erl(v[k]) + "}"
		}
		return invalid("Unrecognised terms [%s] in %s", strings.Join(terms, ","), name)
	}
	if _, ok := v[first]; !ok {
		return invalid("Key %q not found in %s", first, name)
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := v[k]
		switch upstreamKeys[k] {
		case "binary":
			if _, ok := val.(string); !ok {
				return invalid("%s should be binary, actually was %s", k, erl(val))
			}
		case "number":
			if !isNumber(val) {
				return invalid("%s should be a number, actually was %s", k, erl(val))
			}
		case "boolean":
			if _, ok := val.(bool); !ok {
				return invalid("%s should be boolean, actually was %s", k, erl(val))
			}
		case "ack":
			if s, _ := val.(string); s != NoAck && s != OnPublish && s != OnConfirm {
				return invalid("ack-mode should be one of [<<\"no-ack\">>,<<\"on-publish\">>,<<\"on-confirm\">>], actually was %s", erl(val))
			}
		case "cleanup":
			if s, _ := val.(string); s != "default" && s != "never" {
				return invalid("resource-cleanup-mode should be one of [<<\"default\">>,<<\"never\">>], actually was %s", erl(val))
			}
		case "channel":
			if s, _ := val.(string); s != "multiple" && s != "single" {
				return invalid("channel-use-mode should be one of [<<\"multiple\">>,<<\"single\">>], actually was %s", erl(val))
			}
		case "qtype":
			if s, _ := val.(string); s != "classic" && s != "quorum" {
				return invalid("queue-type should be one of [<<\"classic\">>,<<\"quorum\">>], actually was %s", erl(val))
			}
		}
	}
	return nil
}

func isNumber(v any) bool {
	switch v.(type) {
	case json.Number, float64, int, int64:
		return true
	}
	return false
}

func num(v any) float64 {
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case float64:
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	}
	return 0
}

// ParseUpstream reads a federation-upstream's value; its errors are
// *ValidationError, worded as RabbitMQ's.
func ParseUpstream(name string, value map[string]any) (*Upstream, error) {
	if err := checkUpstreamTerms(name, "uri", value); err != nil {
		return nil, err
	}
	uris, err := uriList(value["uri"])
	if err != nil {
		return nil, err
	}
	u := &Upstream{Name: name, URIs: uris, Prefetch: 1000, ReconnectDelay: 5 * time.Second, MaxHops: 1,
		AckMode: OnConfirm, ConsumerTag: "federation-link-" + name}
	u.apply(value)
	return u, nil
}

// apply sets the terms of v over u (an upstream's, then a set
// element's overrides).
func (u *Upstream) apply(v map[string]any) {
	str := func(k string) (string, bool) { s, ok := v[k].(string); return s, ok }
	if s, ok := str("exchange"); ok {
		u.Exchange = s
	}
	if s, ok := str("queue"); ok {
		u.Queue = s
	}
	if s, ok := str("consumer-tag"); ok {
		u.ConsumerTag = s
	}
	if x, ok := v["prefetch-count"]; ok {
		u.Prefetch = int(num(x))
	}
	if x, ok := v["reconnect-delay"]; ok {
		u.ReconnectDelay = time.Duration(num(x) * float64(time.Second))
	}
	if x, ok := v["max-hops"]; ok {
		u.MaxHops = int(num(x))
	}
	if x, ok := v["expires"]; ok {
		u.Expires = int64(num(x))
	}
	if x, ok := v["message-ttl"]; ok {
		u.MessageTTL = int64(num(x))
	}
	if b, ok := v["trust-user-id"].(bool); ok {
		u.TrustUserID = b
	}
	if s, ok := str("ack-mode"); ok {
		u.AckMode = s
	}
	if s, ok := str("resource-cleanup-mode"); ok {
		u.CleanupNever = s == "never"
	}
	if s, ok := str("queue-type"); ok {
		u.QueueType = s
	}
}

// CheckUpstreamSet validates a federation-upstream-set's value: a list
// of {"upstream": name, overrides}.
func CheckUpstreamSet(name string, value any) error {
	list, ok := value.([]any)
	if !ok {
		return invalid("%s is not a list", erl(value))
	}
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return invalid("%s is not a table", erl(e))
		}
		if err := checkUpstreamTerms(name, "upstream", m); err != nil {
			return err
		}
		if _, ok := m["upstream"].(string); !ok {
			return invalid("upstream should be binary, actually was %s", erl(m["upstream"]))
		}
	}
	return nil
}

// upstreamsFor returns the upstreams a federation policy value names in
// vhost: one upstream, a set ("all": every upstream of the vhost), or a
// pattern over upstream names; each with the user of its parameter.
func upstreamsFor(b *broker.Broker, vhost, key string, val any) []linkUpstream {
	params := map[string]broker.DefParameter{}
	for _, p := range b.Parameters(UpstreamComponent) {
		if p.VHost == vhost {
			params[p.Name] = p
		}
	}
	one := func(name string, over map[string]any) (linkUpstream, bool) {
		p, ok := params[name]
		if !ok {
			return linkUpstream{}, false
		}
		value, _ := p.Value.(map[string]any)
		u, err := ParseUpstream(name, value)
		if err != nil {
			return linkUpstream{}, false
		}
		if over != nil {
			u.apply(over)
		}
		return linkUpstream{u: u, user: p.User}, true
	}
	s, _ := val.(string)
	var out []linkUpstream
	switch key {
	case "federation-upstream":
		if u, ok := one(s, nil); ok {
			out = append(out, u)
		}
	case "federation-upstream-pattern":
		re, err := regexp.Compile(s)
		if err != nil {
			return nil
		}
		for name := range params {
			if re.MatchString(name) {
				if u, ok := one(name, nil); ok {
					out = append(out, u)
				}
			}
		}
	case "federation-upstream-set":
		if s == "all" {
			for name := range params {
				if u, ok := one(name, nil); ok {
					out = append(out, u)
				}
			}
			break
		}
		for _, p := range b.Parameters(UpstreamSetComponent) {
			if p.VHost != vhost || p.Name != s {
				continue
			}
			list, _ := p.Value.([]any)
			for _, e := range list {
				m, _ := e.(map[string]any)
				name, _ := m["upstream"].(string)
				if u, ok := one(name, m); ok {
					out = append(out, u)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].u.Name < out[j].u.Name })
	return out
}

// linkUpstream is an upstream and the user its parameter acts for.
type linkUpstream struct {
	u    *Upstream
	user string
}

// PutUpstream validates and keeps a federation-upstream (component
// UpstreamComponent) or a federation-upstream-set (UpstreamSetComponent)
// of vhost, defined by user: the links it feeds connect as that user to
// this broker. created is false when it replaced one.
func (m *Manager) PutUpstream(component, user, vhost, name string, value any) (created bool, err error) {
	switch component {
	case UpstreamComponent:
		v, ok := value.(map[string]any)
		if !ok {
			return false, invalid("%s is not a table", erl(value))
		}
		u, err := ParseUpstream(name, v)
		if err != nil {
			return false, err
		}
		for _, raw := range u.URIs {
			if p, err := ParseURI(raw); err == nil && p.Local {
				vh := vhost
				if p.HasVHost {
					vh = p.VHost
				}
				if !m.cfg.Broker.CanAccessVHost(user, vh) {
					return false, &RefusedError{Msg: fmt.Sprintf("access to vhost '%s' refused for user '%s'", vh, user)}
				}
			}
		}
	case UpstreamSetComponent:
		if err := CheckUpstreamSet(name, value); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("unknown component %q", component)
	}
	_, existed := m.Param(component, vhost, name)
	if err := m.cfg.Broker.SetParameterAs(vhost, component, name, value, user); err != nil {
		return false, err
	}
	m.Kick()
	return !existed, nil
}
