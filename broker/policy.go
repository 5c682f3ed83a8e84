package broker

// Policies and operator policies: validation at set time (R1.11), which
// policy applies to a queue or exchange, and the settings in force when
// queue arguments and policies meet (R1.12), applied live (R1.13).
//
// Behaviour is RabbitMQ 4.x's (rabbit_policy, rabbit_policies,
// rabbit_queue_type_util:args_policy_lookup, rabbit_amqqueue_process
// process_args_policy, rabbit_quorum_queue gather_policy_config); the
// validation texts were confirmed with rabbitmqctl set_policy against
// RabbitMQ 3.10.8 where the two agree. Where 3.10.8 differs, Warren
// follows 4.x:
//
//   - delivery-limit accepts any integer (3.10: >= 0, "-5 is not a valid
//     delivery limit"); a negative value means unlimited.
//   - dead-letter-strategy is a policy key (3.10: not recognised).
//   - apply-to also accepts classic_queues, quorum_queues and streams
//     (3.10: "apply-to 'classic_queues' unrecognised; should be 'queues',
//     'exchanges' or 'all'").
//   - operator policies may set overflow and queue-version (3.10: "not
//     recognised policy settings").
//
// Where Warren goes beyond RabbitMQ: classic queues honour delivery-limit
// (design.md), so a policy holding delivery-limit still applies to them;
// RabbitMQ skips such a policy for classic queues.
//
// Equal priorities: RabbitMQ sorts the matching policies by priority
// with a stable sort over the order its parameter table yields, which is
// a hash order (3.10.8 picked "c" over "a" and "b", and "aa" over "zz").
// Warren makes the tie deterministic: the policy whose name sorts first.

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/erlterm"
)

// Policy apply-to values.
const (
	ApplyToAll           = "all"
	ApplyToQueues        = "queues"
	ApplyToExchanges     = "exchanges"
	ApplyToClassicQueues = "classic_queues"
	ApplyToQuorumQueues  = "quorum_queues"
	ApplyToStreams       = "streams"
)

// Policy is a policy or an operator policy of a vhost: a Definition of
// settings applied to the queues and exchanges whose name Pattern
// matches (an unanchored regular expression search, as RabbitMQ's
// re:run). ApplyTo "" means "all".
type Policy struct {
	VHost, Name, Pattern, ApplyTo string
	Priority                      int
	Definition                    map[string]any

	re  *regexp.Regexp
	def policyDef
}

// PolicyError is a policy that fails validation. Reason is the text
// rabbitmqctl prints after "Validation failed".
type PolicyError struct{ Reason string }

func (e *PolicyError) Error() string { return e.Reason }

func policyErrorf(format string, a ...any) error {
	return &PolicyError{Reason: fmt.Sprintf(format, a...)}
}

// policyDef is a validated definition in typed form.
type policyDef struct {
	dlx, dlrk, dlStrategy, overflow, alternate, delayedRetryType  *string
	messageTTL, expires, maxLength, maxLengthBytes, deliveryLimit *int64
	delayedRetryMin, delayedRetryMax                              *int64
	maxAge                                                        *string
	segmentBytes                                                  *int64
}

// policyKey validates one definition key; it returns the value in
// canonical form (int64 for integers) or an error.
type policyKey struct {
	user, operator bool
	check          func(v any) (any, error)
}

func intKey(min int64, what string) func(any) (any, error) {
	return func(v any) (any, error) {
		if n, ok := policyInt(v); ok && n >= min {
			return n, nil
		}
		return nil, policyErrorf("%s is not a valid %s", erlterm.JSON(v), what)
	}
}

func anyIntKey(what string) func(any) (any, error) {
	return intKey(math.MinInt64, what)
}

func stringKey(what string) func(any) (any, error) {
	return func(v any) (any, error) {
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, policyErrorf("%s is not a valid %s", erlterm.JSON(v), what)
	}
}

func enumKey(what string, values ...string) func(any) (any, error) {
	return func(v any) (any, error) {
		if s, ok := v.(string); ok && slices.Contains(values, s) {
			return s, nil
		}
		return nil, policyErrorf("%s is not a valid %s", erlterm.JSON(v), what)
	}
}

// policyKeys are the definition keys RabbitMQ 4.x validates
// (rabbit_policies:validate_policy0, rabbit_quorum_queue and
// rabbit_classic_queue validators); user marks policy keys, operator
// operator-policy keys. Keys Warren does not act on are still accepted,
// as RabbitMQ accepts them.
var policyKeys = map[string]policyKey{
	"alternate-exchange":            {true, false, stringKey("alternate exchange name")},
	"consumer-disconnected-timeout": {true, false, intKey(0, "consumer disconnected timeout")},
	"consumer-timeout":              {true, false, intKey(0, "consumer timeout")},
	"dead-letter-exchange":          {true, false, stringKey("dead letter exchange name")},
	"dead-letter-routing-key":       {true, false, stringKey("dead letter routing key")},
	"dead-letter-strategy":          {true, false, enumKey("dead letter strategy", "at-most-once", "at-least-once")},
	"message-ttl":                   {true, true, intKey(0, "message TTL")},
	"expires":                       {true, true, intKey(1, "queue expiry")},
	"max-length":                    {true, true, intKey(0, "maximum length")},
	"max-length-bytes":              {true, true, intKey(0, "maximum length in bytes")},
	"max-in-memory-length":          {true, true, intKey(0, "maximum memory in bytes")},
	"max-in-memory-bytes":           {true, true, intKey(0, "maximum memory in bytes")},
	"queue-mode":                    {true, false, enumKey("queue-mode value", "default", "lazy")},
	"queue-version":                 {true, true, checkQueueVersionPolicy},
	"overflow":                      {true, true, enumKey("overflow value", "drop-head", "reject-publish", "reject-publish-dlx")},
	"delivery-limit":                {true, true, anyIntKey("delivery limit")},
	"max-age":                       {true, false, checkMaxAgePolicy},
	"stream-max-segment-size-bytes": {true, false, checkSegmentSizePolicy},
	"stream-filter-size-bytes":      {true, false, checkFilterSizePolicy},
	"queue-leader-locator":          {true, false, enumKey("queue leader locator value", "client-local", "balanced", "random", "least-leaders")},
	"initial-cluster-size":          {true, false, intKey(0, "cluster size")},
	"queue-master-locator":          {true, true, enumKey("master locator", "client-local", "balanced", "random", "least-leaders")},
	"target-group-size":             {true, true, checkTargetGroupSizePolicy},
	"member-placement-tag":          {true, true, checkPlacementTagPolicy},
	"delayed-retry-type":            {true, true, checkDelayedRetryTypePolicy},
	"delayed-retry-min":             {true, true, checkDelayedRetryDelayPolicy("minimum")},
	"delayed-retry-max":             {true, true, checkDelayedRetryDelayPolicy("maximum")},
	// Federation (issue 24; rabbit_federation_parameters): one of the
	// three at most (checkFederationKeys).
	"federation-upstream":         {true, false, federationNameKey("federation upstream name")},
	"federation-upstream-set":     {true, false, federationNameKey("federation upstream set name")},
	"federation-upstream-pattern": {true, false, checkFederationPattern},
}

func federationNameKey(what string) func(any) (any, error) {
	return func(v any) (any, error) {
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, policyErrorf("%s is not a valid %s", erlterm.JSON(v), what)
	}
}

func checkFederationPattern(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, policyErrorf("%s is not a valid federation upstream pattern name", erlterm.JSON(v))
	}
	if _, err := regexp.Compile(s); err != nil {
		return nil, policyErrorf("Invalid regex %s: %v", erlterm.JSON(v), err)
	}
	return s, nil
}

// checkFederationKeys refuses more than one way of naming upstreams.
func checkFederationKeys(def map[string]any) error {
	n := 0
	for _, k := range []string{"federation-upstream", "federation-upstream-set", "federation-upstream-pattern"} {
		if _, ok := def[k]; ok {
			n++
		}
	}
	if n > 1 {
		return policyErrorf("cannot specify federation-upstream, federation-upstream-set or federation-upstream-pattern together")
	}
	return nil
}

// QueuePolicyKey returns key of the policy that applies to queue q (a
// federated queue's upstreams, for bridge).
func (v *VHost) QueuePolicyKey(q *Queue, key string) (any, bool) {
	user, _ := v.queuePolicies(q)
	if user == nil {
		return nil, false
	}
	val, ok := user.Definition[key]
	return val, ok
}

// ExchangePolicyKey returns key of the policy that applies to exchange
// name (a federation link's upstreams, for bridge).
func (v *VHost) ExchangePolicyKey(name, key string) (any, bool) {
	s := v.policies.snap.Load()
	if s == nil {
		return nil, false
	}
	p := firstExchangePolicy(s.user, name)
	if p == nil {
		return nil, false
	}
	val, ok := p.Definition[key]
	return val, ok
}

func checkQueueVersionPolicy(v any) (any, error) {
	if n, ok := policyInt(v); ok && (n == 1 || n == 2) {
		return n, nil
	}
	return nil, policyErrorf("%s is not a valid queue-version value", erlterm.JSON(v))
}

func checkMaxAgePolicy(v any) (any, error) {
	if checkMaxAgeArg(v, nil) == "" {
		return v, nil
	}
	return nil, policyErrorf("%s is not a valid max age", erlterm.JSON(v))
}

// maxStreamSegmentSize is RabbitMQ's ?MAX_STREAM_MAX_SEGMENT_SIZE (3 GB).
const maxStreamSegmentSize = 3_000_000_000

func checkSegmentSizePolicy(v any) (any, error) {
	if n, ok := policyInt(v); ok && n >= 0 && n <= maxStreamSegmentSize {
		return n, nil
	}
	return nil, policyErrorf("%s is not a valid segment size", erlterm.JSON(v))
}

func checkFilterSizePolicy(v any) (any, error) {
	if n, ok := policyInt(v); ok && n >= 16 && n <= 255 {
		return n, nil
	}
	return nil, policyErrorf("%s is not a valid filter size. Valid range is 16-255", erlterm.JSON(v))
}

func checkTargetGroupSizePolicy(v any) (any, error) {
	if n, ok := policyInt(v); ok && n > 0 {
		return n, nil
	}
	return nil, policyErrorf("%s is not a valid qq target count value", erlterm.JSON(v))
}

func checkPlacementTagPolicy(v any) (any, error) {
	if s, ok := v.(string); ok && s != "" {
		return s, nil
	}
	return nil, policyErrorf("%s is not a valid member-placement-tag value. Must be a non-empty string", erlterm.JSON(v))
}

func checkDelayedRetryTypePolicy(v any) (any, error) {
	if s, ok := v.(string); ok && slices.Contains([]string{"all", "failed", "returned", "disabled"}, s) {
		return s, nil
	}
	return nil, policyErrorf("%s is not a valid delayed retry type. Must be one of: all, failed, returned, disabled", erlterm.JSON(v))
}

func checkDelayedRetryDelayPolicy(which string) func(any) (any, error) {
	return func(v any) (any, error) {
		if n, ok := policyInt(v); ok && n > 0 {
			return n, nil
		}
		return nil, policyErrorf("%s is not a valid delayed retry %s delay. Must be a positive integer", erlterm.JSON(v), which)
	}
}

// policyInt returns v as an integer: a Go integer, a json.Number written
// as an integer, or a float64 with an integral value (what encoding/json
// yields without UseNumber). A JSON number written with a fraction or an
// exponent is not an integer, as in RabbitMQ's JSON decoder.
// JSONInt reads an integer from a decoded JSON value (json.Number, or an
// integral float64) or a field value's integer types.
func JSONInt(v any) (int64, bool) { return policyInt(v) }

func policyInt(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return n, err == nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return int64(x), true
		}
		return 0, false
	case float32:
		return policyInt(float64(x))
	case bool, string, nil:
		return 0, false
	}
	return IntArg(v)
}

// compilePolicy validates p as RabbitMQ validates a policy (operator
// selects the operator-policy keys) and returns it ready to match.
// Checks run in the order whose error rabbitmqctl reports first:
// pattern, apply-to, then the definition keys in name order, then the
// keys nobody recognises.
func compilePolicy(p Policy, operator bool) (*Policy, error) {
	re, err := compilePolicyPattern(p.Pattern)
	if err != nil {
		return nil, err
	}
	if p.ApplyTo == "" {
		p.ApplyTo = ApplyToAll
	}
	switch p.ApplyTo {
	case ApplyToAll, ApplyToQueues, ApplyToExchanges, ApplyToClassicQueues, ApplyToQuorumQueues, ApplyToStreams:
	default:
		return nil, policyErrorf("apply-to '%s' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'", p.ApplyTo)
	}
	if len(p.Definition) == 0 {
		return nil, policyErrorf("no policy provided")
	}
	keys := make([]string, 0, len(p.Definition))
	for k := range p.Definition {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	def := make(map[string]any, len(p.Definition))
	var unknown []byte
	for _, k := range keys {
		pk, ok := policyKeys[k]
		if !ok || (operator && !pk.operator) || (!operator && !pk.user) {
			if unknown != nil {
				unknown = append(unknown, ',')
			}
			unknown = append(unknown, '{')
			unknown = erlterm.AppendBinary(unknown, []byte(k))
			unknown = append(unknown, ',')
			unknown = erlterm.AppendJSON(unknown, p.Definition[k])
			unknown = append(unknown, '}')
			continue
		}
		v, err := pk.check(p.Definition[k])
		if err != nil {
			return nil, err
		}
		def[k] = v
	}
	if unknown != nil {
		return nil, policyErrorf("[%s] are not recognised policy settings", unknown)
	}
	if err := checkDelayedRetryConstraints(def); err != nil {
		return nil, err
	}
	if err := checkFederationKeys(def); err != nil {
		return nil, err
	}
	p.Definition = def
	p.re = re
	p.def = parsePolicyDef(def)
	return &p, nil
}

// checkDelayedRetryConstraints is rabbit_quorum_queue's
// validate_delayed_retry_constraints.
func checkDelayedRetryConstraints(def map[string]any) error {
	typ, hasType := def["delayed-retry-type"].(string)
	minV, hasMin := def["delayed-retry-min"].(int64)
	maxV, hasMax := def["delayed-retry-max"].(int64)
	switch {
	case hasType && typ != "disabled" && !hasMin:
		return policyErrorf("delayed-retry-min is required when delayed-retry-type is %s", typ)
	case hasMin && hasMax && maxV < minV:
		return policyErrorf("delayed-retry-max (%d) must not be smaller than delayed-retry-min (%d)", maxV, minV)
	}
	return nil
}

// compilePolicyPattern compiles a pattern; the error text follows
// RabbitMQ's ("pattern should be regular expression but is invalid:
// {Message,Offset}" with PCRE's message where Warren knows it). Go's RE2
// has no back-references or look-around, so patterns using them are
// refused.
func compilePolicyPattern(pattern string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(pattern)
	if err == nil {
		return re, nil
	}
	msg := err.Error()
	if se, ok := err.(*syntax.Error); ok {
		switch se.Code {
		case syntax.ErrMissingParen:
			msg = "missing )"
		case syntax.ErrUnexpectedParen:
			msg = "unmatched closing parenthesis"
		case syntax.ErrMissingBracket:
			msg = "missing terminating ] for character class"
		case syntax.ErrMissingRepeatArgument:
			msg = "quantifier does not follow a repeatable item"
		default:
			msg = string(se.Code)
		}
	}
	return nil, policyErrorf("pattern should be regular expression but is invalid: {%s,%d}", erlterm.Charlist(msg), len(pattern))
}

func parsePolicyDef(def map[string]any) policyDef {
	var d policyDef
	str := func(k string) *string {
		if s, ok := def[k].(string); ok {
			return &s
		}
		return nil
	}
	num := func(k string) *int64 {
		if n, ok := def[k].(int64); ok {
			return &n
		}
		return nil
	}
	d.dlx, d.dlrk, d.dlStrategy = str("dead-letter-exchange"), str("dead-letter-routing-key"), str("dead-letter-strategy")
	d.overflow, d.alternate, d.delayedRetryType = str("overflow"), str("alternate-exchange"), str("delayed-retry-type")
	d.messageTTL, d.expires = num("message-ttl"), num("expires")
	d.maxLength, d.maxLengthBytes = num("max-length"), num("max-length-bytes")
	d.deliveryLimit = num("delivery-limit")
	d.maxAge, d.segmentBytes = str("max-age"), num("stream-max-segment-size-bytes")
	d.delayedRetryMin, d.delayedRetryMax = num("delayed-retry-min"), num("delayed-retry-max")
	return d
}

// unsupportedPolicyKeys are, per queue type, the keys that make a policy
// not apply at all to a queue of that type (the queue type's
// capabilities() unsupported_policies, via
// rabbit_queue_type:is_policy_applicable). Warren's classic queues honour
// delivery-limit, so it is not listed for them.
var unsupportedPolicyKeys = map[string][]string{
	QueueTypeClassic: {"max-age", "stream-max-segment-size-bytes", "initial-cluster-size",
		"dead-letter-strategy", "max-in-memory-length", "max-in-memory-bytes", "target-group-size",
		"selector-fields", "selector-field-max-bytes"},
	QueueTypeQuorum: {"max-priority", "queue-mode", "ha-mode", "ha-params", "ha-sync-mode",
		"ha-promote-on-shutdown", "ha-promote-on-failure", "queue-master-locator",
		"max-age", "stream-max-segment-size-bytes", "initial-cluster-size",
		"selector-fields", "selector-field-max-bytes"},
	QueueTypeStream: {"expires", "message-ttl", "dead-letter-exchange", "dead-letter-routing-key",
		"max-length", "max-in-memory-length", "max-in-memory-bytes", "max-priority", "overflow",
		"queue-mode", "delivery-limit", "ha-mode", "ha-params", "ha-sync-mode",
		"ha-promote-on-shutdown", "ha-promote-on-failure", "queue-master-locator",
		"dead-letter-strategy", "target-group-size", "selector-fields", "selector-field-max-bytes"},
}

// appliesToQueue reports whether p applies to a queue of the given name
// and type (rabbit_policy:matches for queues).
func (p *Policy) appliesToQueue(name, typ string) bool {
	switch p.ApplyTo {
	case ApplyToAll, ApplyToQueues:
	case ApplyToClassicQueues:
		if typ != QueueTypeClassic {
			return false
		}
	case ApplyToQuorumQueues:
		if typ != QueueTypeQuorum {
			return false
		}
	case ApplyToStreams:
		if typ != QueueTypeStream {
			return false
		}
	default:
		return false
	}
	for _, k := range unsupportedPolicyKeys[typ] {
		if _, ok := p.Definition[k]; ok {
			return false
		}
	}
	return p.re.MatchString(name)
}

// appliesToExchange reports whether p applies to the named exchange.
func (p *Policy) appliesToExchange(name string) bool {
	return (p.ApplyTo == ApplyToAll || p.ApplyTo == ApplyToExchanges) && p.re.MatchString(name)
}

// policySet is an immutable snapshot of a vhost's policies, sorted by
// priority (highest first), then name.
type policySet struct {
	user, op []*Policy
}

// vhostPolicies holds a vhost's policies. Readers load the snapshot
// without locking; writers serialise on mu, which is taken before the
// vhost's lock.
type vhostPolicies struct {
	mu   sync.Mutex
	snap atomic.Pointer[policySet]
}

func (vp *vhostPolicies) load() *policySet {
	if s := vp.snap.Load(); s != nil {
		return s
	}
	return &policySet{}
}

func sortPolicies(ps []*Policy) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Priority != ps[j].Priority {
			return ps[i].Priority > ps[j].Priority
		}
		return ps[i].Name < ps[j].Name
	})
}

// put replaces (or with p nil, removes) the named policy and reports
// whether it existed.
func (vp *vhostPolicies) put(operator bool, name string, p *Policy) bool {
	cur := vp.load()
	next := &policySet{user: cur.user, op: cur.op}
	list := &next.user
	if operator {
		list = &next.op
	}
	found := false
	out := make([]*Policy, 0, len(*list)+1)
	for _, o := range *list {
		if o.Name == name {
			found = true
			continue
		}
		out = append(out, o)
	}
	if p != nil {
		out = append(out, p)
	}
	sortPolicies(out)
	*list = out
	vp.snap.Store(next)
	return found
}

func firstQueuePolicy(ps []*Policy, name, typ string) *Policy {
	for _, p := range ps {
		if p.appliesToQueue(name, typ) {
			return p
		}
	}
	return nil
}

func firstExchangePolicy(ps []*Policy, name string) *Policy {
	for _, p := range ps {
		if p.appliesToExchange(name) {
			return p
		}
	}
	return nil
}

// SetPolicy creates or replaces a policy after validating it as RabbitMQ
// does (R1.11); the vhost's matching queues take the new settings at
// once (R1.13). p.VHost is ignored (set to the vhost's name).
func (v *VHost) SetPolicy(p Policy) error { return v.setPolicy(p, false) }

// SetOperatorPolicy creates or replaces an operator policy. Operator
// policies may only set limits (expires, message-ttl, max-length(-bytes),
// max-in-memory-*, delivery-limit, overflow, queue-version, ...), never
// dead-lettering keys (R1.12).
func (v *VHost) SetOperatorPolicy(p Policy) error { return v.setPolicy(p, true) }

func (v *VHost) setPolicy(p Policy, operator bool) error {
	if v.b.replicating() {
		p.VHost = v.Name
		if _, err := compilePolicy(p, operator); err != nil {
			return err
		}
		return v.b.propose(fmt.Sprintf("policy '%s' in vhost '%s'", p.Name, v.Name),
			&command{Op: opPolicySet, VHost: v.Name, Policy: &p, Operator: operator})
	}
	return v.setPolicyLocal(p, operator)
}

func (v *VHost) setPolicyLocal(p Policy, operator bool) error {
	p.VHost = v.Name
	p.Definition = copyDefinition(p.Definition)
	cp, err := compilePolicy(p, operator)
	if err != nil {
		return err
	}
	v.policies.mu.Lock()
	defer v.policies.mu.Unlock()
	v.policies.put(operator, p.Name, cp)
	v.applyPolicies()
	// policies.mu orders policy writes (persist.go).
	return v.b.persist(policyOp(v.Name, copyPolicy(cp), operator))
}

// DeletePolicy removes a policy; it reports whether it existed. Queues it
// applied to fall back to the next matching policy or their arguments.
func (v *VHost) DeletePolicy(name string) bool { return v.deletePolicy(name, false) }

// DeleteOperatorPolicy removes an operator policy.
func (v *VHost) DeleteOperatorPolicy(name string) bool { return v.deletePolicy(name, true) }

func (v *VHost) deletePolicy(name string, operator bool) bool {
	ok, err := v.deletePolicyE(name, operator)
	if err != nil {
		v.b.log.Error("deleting a policy", "vhost", v.Name, "policy", name, "err", err)
	}
	return ok
}

func (v *VHost) deletePolicyLocal(name string, operator bool) bool {
	v.policies.mu.Lock()
	defer v.policies.mu.Unlock()
	if !v.policies.put(operator, name, nil) {
		return false
	}
	v.applyPolicies()
	kind := DefKindPolicies
	if operator {
		kind = DefKindOperatorPolicies
	}
	v.b.persist(delOp(kind, scopedKey(v.Name, name))) // logged
	return true
}

// Policies returns copies of the vhost's policies sorted by name.
func (v *VHost) Policies() []Policy { return copyPolicies(v.policies.load().user) }

// OperatorPolicies returns copies of the vhost's operator policies sorted by name.
func (v *VHost) OperatorPolicies() []Policy { return copyPolicies(v.policies.load().op) }

// Policy returns the named policy.
func (v *VHost) Policy(name string) (Policy, bool) {
	for _, p := range v.policies.load().user {
		if p.Name == name {
			return copyPolicy(p), true
		}
	}
	return Policy{}, false
}

func copyDefinition(d map[string]any) map[string]any {
	if d == nil {
		return nil
	}
	c := make(map[string]any, len(d))
	for k, val := range d {
		c[k] = val
	}
	return c
}

func copyPolicy(p *Policy) Policy {
	c := *p
	c.Definition = copyDefinition(p.Definition)
	c.re, c.def = nil, policyDef{}
	return c
}

func copyPolicies(ps []*Policy) []Policy {
	out := make([]Policy, 0, len(ps))
	for _, p := range ps {
		out = append(out, copyPolicy(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// applyPolicies recomputes the effective settings of every queue of the
// vhost. The caller holds v.policies.mu (so that concurrent changes are
// applied in order) and not v.mu.
func (v *VHost) applyPolicies() {
	for _, q := range v.Queues() {
		v.applyQueuePolicies(q)
	}
}

// applyQueuePolicies installs q's effective settings from its arguments
// and the policies that apply to it now. It takes no vhost lock, so
// DeclareQueue calls it with v.mu held.
func (v *VHost) applyQueuePolicies(q *Queue) {
	user, op := v.queuePolicies(q)
	q.SetEffective(effectiveQueueArgs(q.Config, q.Args, user, op))
}

func (v *VHost) queuePolicies(q *Queue) (user, op *Policy) {
	s := v.policies.load()
	typ := q.Config.Type
	if typ == "" {
		typ = QueueTypeClassic
	}
	return firstQueuePolicy(s.user, q.Name, typ), firstQueuePolicy(s.op, q.Name, typ)
}

// QueuePolicy returns the names of the policy and operator policy that
// apply to q ("" for none), as list_queues shows them.
func (v *VHost) QueuePolicy(q *Queue) (policy, operatorPolicy string) {
	user, op := v.queuePolicies(q)
	return policyName(user), policyName(op)
}

// ExchangePolicy returns the names of the policy and operator policy that
// apply to the named exchange ("" for none).
func (v *VHost) ExchangePolicy(name string) (policy, operatorPolicy string) {
	s := v.policies.load()
	return policyName(firstExchangePolicy(s.user, name)), policyName(firstExchangePolicy(s.op, name))
}

// policyAlternateExchange is the alternate exchange a policy gives the
// named exchange, "" for none. Lock-free: routing calls it with v.mu held.
func (v *VHost) policyAlternateExchange(name string) string {
	s := v.policies.snap.Load()
	if s == nil || len(s.user) == 0 {
		return ""
	}
	if p := firstExchangePolicy(s.user, name); p != nil && p.def.alternate != nil {
		return *p.def.alternate
	}
	return ""
}

func policyName(p *Policy) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// mergeOperatorDefinition combines the applying policy and operator
// policy as rabbit_policy:merge_operator_definitions does: numeric limits
// take the lower value, delivery-limit the finite one when either is
// negative, and overflow, queue-version and the rest the operator's.
func mergeOperatorDefinition(user, op *Policy) policyDef {
	switch {
	case user == nil && op == nil:
		return policyDef{}
	case op == nil:
		return user.def
	case user == nil:
		return op.def
	}
	d := user.def
	lower := func(u, o *int64) *int64 {
		switch {
		case u == nil:
			return o
		case o == nil:
			return u
		}
		return ptr(min(*u, *o))
	}
	pick := func(u, o *string) *string {
		if o != nil {
			return o
		}
		return u
	}
	d.messageTTL = lower(d.messageTTL, op.def.messageTTL)
	d.expires = lower(d.expires, op.def.expires)
	d.maxLength = lower(d.maxLength, op.def.maxLength)
	d.maxLengthBytes = lower(d.maxLengthBytes, op.def.maxLengthBytes)
	d.deliveryLimit = resolveDeliveryLimit(d.deliveryLimit, op.def.deliveryLimit)
	d.overflow = pick(d.overflow, op.def.overflow)
	d.delayedRetryType = pick(d.delayedRetryType, op.def.delayedRetryType)
	if d.delayedRetryMin == nil || op.def.delayedRetryMin != nil && *op.def.delayedRetryMin > *d.delayedRetryMin {
		d.delayedRetryMin = op.def.delayedRetryMin // max (rabbit_quorum_queue)
	}
	d.delayedRetryMax = lower(d.delayedRetryMax, op.def.delayedRetryMax)
	return d
}

// resolveDeliveryLimit combines two delivery limits: the lower, unless
// either is negative (unlimited), then the higher, so that a finite limit
// wins (rabbit_quorum_queue:resolve_delivery_limit, R1.12).
func resolveDeliveryLimit(a, b *int64) *int64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case *a < 0 || *b < 0:
		return ptr(max(*a, *b))
	}
	return ptr(min(*a, *b))
}

func ptr[T any](v T) *T { return &v }

// effectiveQueueArgs combines a queue's parsed arguments with the policy
// and operator policy that apply to it (either may be nil), per R1.12.
// raw is the queue's argument table, to tell an absent x-overflow or
// x-dead-letter-strategy from its default.
//
//	key                                  classic         quorum
//	message-ttl, expires, max-length(-bytes)  min(policy,arg)  min
//	dead-letter-exchange, -routing-key   argument wins   argument wins (per key)
//	dead-letter-strategy                 n/a             argument wins
//	overflow                             argument wins   policy wins
//	delivery-limit                       min; finite one if either is negative
func effectiveQueueArgs(args QueueArgs, raw amqp.Table, user, op *Policy) QueueArgs {
	e := args
	d := mergeOperatorDefinition(user, op)
	lower := func(arg, pol *int64) *int64 {
		if pol == nil {
			return arg
		}
		if arg == nil {
			return pol
		}
		return ptr(min(*arg, *pol))
	}
	argWins := func(arg, pol *string) *string {
		if arg != nil {
			return arg
		}
		return pol
	}
	e.MessageTTL = lower(args.MessageTTL, d.messageTTL)
	e.Expires = lower(args.Expires, d.expires)
	e.MaxLength = lower(args.MaxLength, d.maxLength)
	e.MaxLengthBytes = lower(args.MaxLengthBytes, d.maxLengthBytes)
	e.DLX = argWins(args.DLX, d.dlx)
	e.DLRK = argWins(args.DLRK, d.dlrk)
	if _, ok := raw["x-dead-letter-strategy"]; !ok && d.dlStrategy != nil {
		e.DeadLetterStrategy = *d.dlStrategy
	}
	if d.overflow != nil {
		_, hasArg := raw["x-overflow"].(string)
		if args.Type == QueueTypeQuorum || !hasArg {
			e.Overflow = *d.overflow
		}
	}
	e.DeliveryLimit = resolveDeliveryLimit(args.DeliveryLimit, d.deliveryLimit)
	// Delayed retry (rabbit_quorum_queue:get_delayed_retry_config): the
	// policy's type wins, delays take the lower value.
	if d.delayedRetryType != nil {
		e.DelayedRetryType = *d.delayedRetryType
	}
	e.DelayedRetryMin = lower(args.DelayedRetryMin, d.delayedRetryMin)
	e.DelayedRetryMax = lower(args.DelayedRetryMax, d.delayedRetryMax)
	// Streams (rabbit_stream_queue): the argument wins.
	if args.MaxAge == "" && d.maxAge != nil {
		e.MaxAge = *d.maxAge
	}
	if args.SegmentBytes == nil {
		e.SegmentBytes = d.segmentBytes
	}
	return e
}

// EffectivePolicyDefinition is the definition of the policies that apply
// to q, as the management API's effective_policy_definition: the keys of
// both; where both set a number, the smaller wins (as RabbitMQ resolves an
// operator policy's max-length, message-ttl and the like).
func (v *VHost) EffectivePolicyDefinition(q *Queue) map[string]any {
	user, op := v.queuePolicies(q)
	out := map[string]any{}
	if user != nil {
		for k, val := range user.Definition {
			out[k] = val
		}
	}
	if op != nil {
		for k, val := range op.Definition {
			cur, both := out[k]
			if both {
				a, aok := policyInt(cur)
				b, bok := policyInt(val)
				if aok && bok && b < a {
					out[k] = val
				}
				continue
			}
			out[k] = val
		}
	}
	return out
}
