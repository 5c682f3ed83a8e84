package broker

// Definitions: import and export of RabbitMQ's definitions JSON, the
// document `rabbitmqctl export_definitions` writes and
// `rabbitmqctl import_definitions` (or the management API) reads.
//
// The format and the import order follow rabbit_definitions: users,
// vhosts, permissions, exchanges, topic permissions, policies, parameters
// (operator policies are parameters of component "operator_policy"),
// queues, bindings. Existing queues and exchanges are left as they are;
// names starting with "amq." and the default exchange are skipped, as
// RabbitMQ skips them. Export leaves out the default and amq.* exchanges,
// exclusive queues and the implicit default-exchange bindings, as
// RabbitMQ's does.
//
// Warren does not keep what it has no use for: global parameters and
// runtime parameters other than operator policies and vhost limits are
// accepted and ignored on import (logged), and exported empty.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// HashingSHA256 is the hashing_algorithm of Warren's (and RabbitMQ's
// default) password hashes.
const HashingSHA256 = "rabbit_password_hashing_sha256"

// Definitions is RabbitMQ's definitions document.
type Definitions struct {
	RabbitVersion   string `json:"rabbit_version,omitempty"`
	RabbitMQVersion string `json:"rabbitmq_version,omitempty"`
	ProductName     string `json:"product_name,omitempty"`
	// ProductVersion is Warren's version; the management API sets it.
	ProductVersion   string               `json:"product_version,omitempty"`
	Users            []DefUser            `json:"users"`
	VHosts           []DefVHost           `json:"vhosts"`
	Permissions      []DefPermission      `json:"permissions"`
	TopicPermissions []DefTopicPermission `json:"topic_permissions"`
	Parameters       []DefParameter       `json:"parameters"`
	GlobalParameters []map[string]any     `json:"global_parameters"`
	Policies         []DefPolicy          `json:"policies"`
	Queues           []DefQueue           `json:"queues"`
	Exchanges        []DefExchange        `json:"exchanges"`
	Bindings         []DefBinding         `json:"bindings"`
}

// DefTags is a user's tags: a JSON list, or (older exports) a
// comma-separated string.
type DefTags []string

// UnmarshalJSON accepts a list or a comma-separated string.
func (t *DefTags) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = nil
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				*t = append(*t, p)
			}
		}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("user tags: want a list or a comma-separated string: %w", err)
	}
	*t = l
	return nil
}

// DefUser is a user. Password (plain text) is accepted on import when
// PasswordHash is absent.
type DefUser struct {
	Name             string         `json:"name"`
	PasswordHash     string         `json:"password_hash"`
	Password         string         `json:"password,omitempty"`
	HashingAlgorithm string         `json:"hashing_algorithm"`
	Tags             DefTags        `json:"tags"`
	Limits           map[string]any `json:"limits"`
}

// DefVHost is a vhost.
type DefVHost struct {
	Name     string         `json:"name"`
	Limits   any            `json:"limits,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// Description and Tags are the metadata as older exports have them.
	Description string `json:"description,omitempty"`
	Tags        any    `json:"tags,omitempty"`
}

// DefPermission is a user's permissions on a vhost.
type DefPermission struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

// DefParameter is a runtime parameter.
type DefParameter struct {
	VHost     string `json:"vhost"`
	Component string `json:"component"`
	Name      string `json:"name"`
	Value     any    `json:"value"`
	// User is the user a shovel acts for (shovel.go); never exported.
	User string `json:"user,omitempty"`
}

// DefPolicy is a policy.
type DefPolicy struct {
	VHost      string         `json:"vhost"`
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Priority   json.Number    `json:"priority"`
	Definition map[string]any `json:"definition"`
}

// DefQueue is a queue. Durable defaults to true on import, as in RabbitMQ.
type DefQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type,omitempty"`
	Durable    *bool          `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

// DefExchange is an exchange. Durable defaults to true on import.
type DefExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    *bool          `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

// DefBinding is a binding; DestinationType is "queue" or "exchange".
type DefBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// ImportDefinitions applies a definitions document to the broker. It
// stops at the first definition it cannot apply and returns its error;
// what was applied before stays (RabbitMQ behaves the same).
func (b *Broker) ImportDefinitions(r io.Reader) error {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var d Definitions
	if err := dec.Decode(&d); err != nil {
		return fmt.Errorf("definitions: %w", err)
	}
	return b.ApplyDefinitions(&d)
}

// ApplyDefinitions applies decoded definitions (see ImportDefinitions).
// Numbers in argument and policy values should be json.Number (decode
// with UseNumber) so that integers and floats stay apart.
func (b *Broker) ApplyDefinitions(d *Definitions) error {
	if b.replicating() {
		return b.proposeImport(d)
	}
	return b.applyDefinitionsLocal(d, nil, importGroups{})
}

// applyDefinitionsLocal is ApplyDefinitions on this node's state; homes
// gives the home node of the new queues (by scopedKey), chosen by the
// node that proposed the import (cmd.go).
func (b *Broker) applyDefinitionsLocal(d *Definitions, homes map[string]string, groups importGroups) error {
	for _, u := range d.Users {
		if u.Name == "" {
			return fmt.Errorf("definitions: a user has no name")
		}
		switch {
		case u.PasswordHash == "" && u.Password != "":
			b.putUserHashLocal(u.Name, HashPassword(u.Password), u.Tags)
		case u.HashingAlgorithm == "" || u.HashingAlgorithm == HashingSHA256:
			b.putUserHashLocal(u.Name, u.PasswordHash, u.Tags)
		default:
			return fmt.Errorf("definitions: user '%s': hashing algorithm %s is not supported (only %s)", u.Name, u.HashingAlgorithm, HashingSHA256)
		}
		for k, n := range limitsOf(map[string]any(u.Limits)) {
			if err := b.setUserLimitLocal(u.Name, k, n); err != nil {
				return fmt.Errorf("definitions: user '%s': %w", u.Name, err)
			}
		}
	}
	for _, v := range d.VHosts {
		if v.Name == "" {
			return fmt.Errorf("definitions: a vhost has no name")
		}
		b.addVHostLocal(v.Name)
		if m := metaOf(v); m.Description != "" || len(m.Tags) > 0 {
			b.setVHostMetaLocal(v.Name, m)
		}
		for k, n := range limitsOf(v.Limits) {
			if err := b.setVHostLimitLocal(v.Name, k, n); err != nil {
				return fmt.Errorf("definitions: vhost '%s': %w", v.Name, err)
			}
		}
	}
	for _, p := range d.Permissions {
		if b.VHost(p.VHost) == nil {
			return fmt.Errorf("definitions: permissions of user '%s': no vhost '%s'", p.User, p.VHost)
		}
		if err := b.setPermissionsLocal(p.VHost, p.User, Permission{Configure: p.Configure, Write: p.Write, Read: p.Read}); err != nil {
			return fmt.Errorf("definitions: permissions of user '%s' in vhost '%s': %w", p.User, p.VHost, err)
		}
	}
	for _, x := range d.Exchanges {
		if x.Name == "" || strings.HasPrefix(x.Name, "amq.") {
			b.log.Warn("definitions: skipping a default or amq.* exchange", "exchange", x.Name, "vhost", x.VHost)
			continue
		}
		v, err := b.defVHost(x.VHost, "exchange", x.Name)
		if err != nil {
			return err
		}
		if v.Exchange(x.Name) != nil {
			continue
		}
		args, err := jsonToTable(x.Arguments)
		if err != nil {
			return fmt.Errorf("definitions: exchange '%s' in vhost '%s': %w", x.Name, x.VHost, err)
		}
		if err := v.declareExchangeLocal(ExchangeSpec{Name: x.Name, Kind: x.Type, Durable: boolOr(x.Durable, true),
			AutoDelete: x.AutoDelete, Internal: x.Internal, Args: args}, false); err != nil {
			return fmt.Errorf("definitions: exchange '%s' in vhost '%s': %w", x.Name, x.VHost, err)
		}
	}
	for _, p := range d.TopicPermissions {
		if b.VHost(p.VHost) == nil {
			return fmt.Errorf("definitions: topic permissions of user '%s': no vhost '%s'", p.User, p.VHost)
		}
		if err := b.setTopicPermissionLocal(p.VHost, p.User, p.TopicPermission); err != nil {
			return fmt.Errorf("definitions: topic permissions of user '%s' in vhost '%s': %w", p.User, p.VHost, err)
		}
	}
	if len(d.GlobalParameters) > 0 {
		b.log.Info("definitions: global parameters ignored", "count", len(d.GlobalParameters))
	}
	for _, p := range d.Policies {
		prio, err := defPriority(p.Priority)
		if err != nil {
			return fmt.Errorf("definitions: policy '%s' in vhost '%s': %w", p.Name, p.VHost, err)
		}
		if err := b.defSetPolicy(p.VHost, Policy{Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo, Priority: prio, Definition: p.Definition}, false); err != nil {
			return err
		}
	}
	for _, p := range d.Parameters {
		if p.Component == "vhost-limits" {
			// RabbitMQ exports a vhost's limits as this parameter.
			if _, err := b.defVHost(p.VHost, "vhost limits", p.Name); err != nil {
				return err
			}
			for k, n := range limitsOf(p.Value) {
				if err := b.setVHostLimitLocal(p.VHost, k, n); err != nil {
					return fmt.Errorf("definitions: limits of vhost '%s': %w", p.VHost, err)
				}
			}
			continue
		}
		if p.Component != "operator_policy" {
			b.log.Warn("definitions: runtime parameter ignored", "component", p.Component, "name", p.Name, "vhost", p.VHost)
			continue
		}
		pol, err := operatorPolicyParameter(p)
		if err != nil {
			return err
		}
		if err := b.defSetPolicy(p.VHost, pol, true); err != nil {
			return err
		}
	}
	for _, q := range d.Queues {
		if strings.HasPrefix(q.Name, "amq.") {
			b.log.Warn("definitions: skipping a queue whose name begins with 'amq.'", "queue", q.Name, "vhost", q.VHost)
			continue
		}
		v, err := b.defVHost(q.VHost, "queue", q.Name)
		if err != nil {
			return err
		}
		if v.Queue(q.Name) != nil {
			continue
		}
		args, err := jsonToTable(q.Arguments)
		if err != nil {
			return fmt.Errorf("definitions: queue '%s' in vhost '%s': %w", q.Name, q.VHost, err)
		}
		if _, ok := args["x-queue-type"]; !ok && q.Type != "" && q.Type != QueueTypeClassic {
			if args == nil {
				args = amqp.Table{}
			}
			args["x-queue-type"] = q.Type
		}
		spec := QueueSpec{Name: q.Name, Durable: boolOr(q.Durable, true), AutoDelete: q.AutoDelete, Args: args,
			Home: homes[scopedKey(q.VHost, q.Name)]}
		if ms := groups.members[scopedKey(q.VHost, q.Name)]; len(ms) > 0 && groups.index != 0 {
			groups.n++
			spec.Members, spec.Group, spec.newGroup = ms, importGroupID(groups.index, groups.n), true
		}
		if _, _, _, err := v.declareQueueLocal(spec, false); err != nil {
			return fmt.Errorf("definitions: queue '%s' in vhost '%s': %w", q.Name, q.VHost, err)
		}
	}
	for _, bd := range d.Bindings {
		v, err := b.defVHost(bd.VHost, "binding from exchange", bd.Source)
		if err != nil {
			return err
		}
		args, err := jsonToTable(bd.Arguments)
		if err != nil {
			return fmt.Errorf("definitions: binding from '%s' to '%s' in vhost '%s': %w", bd.Source, bd.Destination, bd.VHost, err)
		}
		toExchange := bd.DestinationType == "exchange"
		if !toExchange && bd.DestinationType != "queue" {
			return fmt.Errorf("definitions: binding from '%s' to '%s' in vhost '%s': destination_type '%s' is not queue or exchange", bd.Source, bd.Destination, bd.VHost, bd.DestinationType)
		}
		if err := v.bindLocal(bd.Source, bd.Destination, toExchange, bd.RoutingKey, args, 0); err != nil {
			return fmt.Errorf("definitions: binding from '%s' to '%s' in vhost '%s': %w", bd.Source, bd.Destination, bd.VHost, err)
		}
	}
	return nil
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func (b *Broker) defVHost(name, what, object string) (*VHost, error) {
	v := b.VHost(name)
	if v == nil {
		return nil, fmt.Errorf("definitions: %s '%s': no vhost '%s'", what, object, name)
	}
	return v, nil
}

func (b *Broker) defSetPolicy(vhost string, p Policy, operator bool) error {
	kind := "policy"
	if operator {
		kind = "operator policy"
	}
	v, err := b.defVHost(vhost, kind, p.Name)
	if err != nil {
		return err
	}
	err = v.setPolicyLocal(p, operator)
	if err != nil {
		return fmt.Errorf("definitions: %s '%s' in vhost '%s': %w", kind, p.Name, vhost, err)
	}
	return nil
}

func defPriority(n json.Number) (int, error) {
	if n == "" {
		return 0, nil
	}
	if i, err := strconv.ParseInt(string(n), 10, 32); err == nil {
		return int(i), nil
	}
	if f, err := n.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < math.MaxInt32 {
		return int(f), nil
	}
	return 0, fmt.Errorf("priority should be an integer, actually was %s", n)
}

// operatorPolicyParameter reads an operator policy parameter. Its
// definition is an object (RabbitMQ 4.x) or a list of [key, value] pairs
// (3.x exports).
func operatorPolicyParameter(p DefParameter) (Policy, error) {
	bad := func(why string) error {
		return fmt.Errorf("definitions: operator policy '%s' in vhost '%s': %s", p.Name, p.VHost, why)
	}
	val, ok := p.Value.(map[string]any)
	if !ok {
		return Policy{}, bad("value is not an object")
	}
	pol := Policy{Name: p.Name}
	pol.Pattern, _ = val["pattern"].(string)
	pol.ApplyTo, _ = val["apply-to"].(string)
	if n, ok := val["priority"].(json.Number); ok {
		prio, err := defPriority(n)
		if err != nil {
			return Policy{}, bad(err.Error())
		}
		pol.Priority = prio
	}
	switch def := val["definition"].(type) {
	case map[string]any:
		pol.Definition = def
	case []any:
		pol.Definition = map[string]any{}
		for _, e := range def {
			kv, ok := e.([]any)
			if !ok || len(kv) != 2 {
				return Policy{}, bad("definition is not a list of [key, value] pairs")
			}
			k, ok := kv[0].(string)
			if !ok {
				return Policy{}, bad("definition key is not a string")
			}
			pol.Definition[k] = kv[1]
		}
	default:
		return Policy{}, bad("no definition")
	}
	return pol, nil
}

// jsonToTable converts JSON arguments to an AMQP table as RabbitMQ's
// rabbit_misc:to_amqp_table does: integers become long (int64), other
// numbers double, objects tables, lists arrays.
//
// Tables and lists nested deeper than amqp.MaxTableDepth levels (the
// arguments themselves being the first) are refused: the store keeps a
// table only as deep as the AMQP codec reads it back, and what is
// accepted must be kept as it was given.
func jsonToTable(m map[string]any) (amqp.Table, error) {
	if len(m) == 0 {
		return nil, nil
	}
	return jsonToTableDepth(m, 1)
}

// ErrTooDeep is wrapped by jsonToTable's error for arguments nested
// deeper than amqp.MaxTableDepth.
var ErrTooDeep = fmt.Errorf("nested deeper than %d levels", amqp.MaxTableDepth)

func jsonToTableDepth(m map[string]any, depth int) (amqp.Table, error) {
	if depth > amqp.MaxTableDepth {
		return nil, ErrTooDeep
	}
	t := make(amqp.Table, len(m))
	for k, v := range m {
		fv, err := jsonToField(v, depth)
		if err != nil {
			if depth == 1 {
				return nil, fmt.Errorf("argument '%s': %w", k, err)
			}
			return nil, err
		}
		t[k] = fv
	}
	return t, nil
}

// jsonToField converts one value found at nesting level depth.
func jsonToField(v any, depth int) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string, bool:
		return x, nil
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, err
		}
		return f, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), nil
		}
		return x, nil
	case map[string]any:
		return jsonToTableDepth(x, depth+1)
	case []any:
		if depth+1 > amqp.MaxTableDepth {
			return nil, ErrTooDeep
		}
		out := make([]any, len(x))
		for i, e := range x {
			fv, err := jsonToField(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = fv
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported JSON value %T", v)
}

// tableToJSON converts an AMQP table for export.
// TableJSON renders a field table as JSON values, as RabbitMQ's HTTP API
// does (the management API uses it for arguments and headers).
func TableJSON(t amqp.Table) map[string]any { return tableToJSON(t) }

// JSONTable is the inverse of TableJSON for JSON decoded with UseNumber.
func JSONTable(m map[string]any) (amqp.Table, error) { return jsonToTable(m) }

func tableToJSON(t amqp.Table) map[string]any {
	m := make(map[string]any, len(t))
	for k, v := range t {
		m[k] = fieldToJSON(v)
	}
	return m
}

func fieldToJSON(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		return tableToJSON(x)
	case map[string]any:
		return tableToJSON(amqp.Table(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fieldToJSON(e)
		}
		return out
	case []byte:
		return string(x)
	case amqp.RawValue:
		if d, ok := x.Decode(); ok {
			return fieldToJSON(d)
		}
		return nil
	case time.Time:
		return x.Unix()
	case amqp.Decimal:
		return float64(x.Value) / math.Pow10(int(x.Scale))
	case float32:
		return FloatJSON(float64(x))
	case float64:
		return FloatJSON(x)
	}
	if n, ok := IntArg(v); ok {
		return n
	}
	return v
}

// FloatJSON is f, or for a value JSON cannot carry (NaN, an infinity:
// RabbitMQ cannot hold one, Warren's AMQP decoder refuses them, only a
// caller of the Go API can set one) the strings "NaN", "Infinity" and
// "-Infinity", as the management API renders them, so that encoding never
// fails.
func FloatJSON(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

// ExportDefinitions writes the broker's definitions as RabbitMQ's
// export_definitions does (a JSON object; keys sorted).
func (b *Broker) ExportDefinitions(w io.Writer) error {
	d := b.Definitions()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// Version is what Warren reports as rabbit_version in exported
// definitions: the RabbitMQ version whose behaviour it follows.
const Version = "4.3.0"

// Definitions returns the broker's definitions.
func (b *Broker) Definitions() *Definitions {
	d := &Definitions{RabbitVersion: Version, RabbitMQVersion: Version, ProductName: "Warren",
		Users: []DefUser{}, VHosts: []DefVHost{}, Permissions: []DefPermission{}, TopicPermissions: []DefTopicPermission{},
		Parameters: []DefParameter{}, GlobalParameters: []map[string]any{}, Policies: []DefPolicy{},
		Queues: []DefQueue{}, Exchanges: []DefExchange{}, Bindings: []DefBinding{}}
	vhosts := b.VHosts()
	for _, name := range b.Users() {
		u := b.User(name)
		if u == nil {
			continue
		}
		tags := DefTags(append([]string{}, u.Tags...))
		d.Users = append(d.Users, DefUser{Name: u.Name, PasswordHash: u.PasswordHash, HashingAlgorithm: HashingSHA256,
			Tags: tags, Limits: limitsJSON(u.Limits)})
		for _, vh := range vhosts {
			if p, ok := b.Permissions(vh, name); ok {
				d.Permissions = append(d.Permissions, DefPermission{User: name, VHost: vh, Configure: p.Configure, Write: p.Write, Read: p.Read})
			}
			for _, tp := range b.TopicPermissions(vh, name) {
				d.TopicPermissions = append(d.TopicPermissions, DefTopicPermission{User: name, VHost: vh, TopicPermission: tp})
			}
		}
	}
	for _, vh := range vhosts {
		v := b.VHost(vh)
		if v == nil {
			continue
		}
		dv := defVHost(vh, v.Meta(), nil)
		dv.Limits = map[string]any{}
		d.VHosts = append(d.VHosts, dv)
		if l, _ := b.VHostLimits(vh); len(l) > 0 {
			d.Parameters = append(d.Parameters, DefParameter{VHost: vh, Component: "vhost-limits", Name: "limits", Value: limitsJSON(l)})
		}
		for _, p := range v.Policies() {
			d.Policies = append(d.Policies, DefPolicy{VHost: vh, Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo,
				Priority: json.Number(strconv.Itoa(p.Priority)), Definition: p.Definition})
		}
		for _, p := range v.OperatorPolicies() {
			d.Parameters = append(d.Parameters, DefParameter{VHost: vh, Component: "operator_policy", Name: p.Name,
				Value: map[string]any{"pattern": p.Pattern, "apply-to": p.ApplyTo, "priority": p.Priority, "definition": p.Definition}})
		}
		for _, x := range v.Exchanges() {
			if x.Name == "" || strings.HasPrefix(x.Name, "amq.") {
				continue
			}
			durable := x.Durable
			d.Exchanges = append(d.Exchanges, DefExchange{Name: x.Name, VHost: vh, Type: x.Kind, Durable: &durable,
				AutoDelete: x.AutoDelete, Internal: x.Internal, Arguments: tableToJSON(x.Args)})
		}
		for _, q := range v.Queues() {
			if q.Exclusive {
				continue
			}
			durable := q.Durable
			typ := q.Config.Type
			if typ == "" {
				typ = QueueTypeClassic
			}
			d.Queues = append(d.Queues, DefQueue{Name: q.Name, VHost: vh, Type: typ, Durable: &durable,
				AutoDelete: q.AutoDelete, Arguments: tableToJSON(q.Args)})
		}
		for _, bi := range v.Bindings() {
			if bi.Source == "" {
				continue
			}
			// RabbitMQ exports bindings to exclusive queues, which it does
			// not export, so they fail to import; Warren leaves them out.
			if x := v.Exchange(bi.Source); x == nil {
				continue
			}
			if !bi.DestinationIsQueue {
				if x := v.Exchange(bi.Destination); x == nil {
					continue
				}
			} else if q := v.Queue(bi.Destination); q == nil || q.Exclusive {
				continue
			}
			dt := "queue"
			if !bi.DestinationIsQueue {
				dt = "exchange"
			}
			d.Bindings = append(d.Bindings, DefBinding{Source: bi.Source, VHost: vh, Destination: bi.Destination,
				DestinationType: dt, RoutingKey: bi.RoutingKey, Arguments: tableToJSON(bi.Args)})
		}
	}
	sort.SliceStable(d.Permissions, func(i, j int) bool {
		if d.Permissions[i].VHost != d.Permissions[j].VHost {
			return d.Permissions[i].VHost < d.Permissions[j].VHost
		}
		return d.Permissions[i].User < d.Permissions[j].User
	})
	return d
}
