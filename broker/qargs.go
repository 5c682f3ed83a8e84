package broker

// Queue arguments: validation at creation, equivalence at redeclare, and
// the parsed form the queue runs with (spec dead-lettering.md §1,
// R1.1-R1.10).
//
// The texts are RabbitMQ 4.x's (rabbit_amqqueue check_declare_arguments,
// rabbit_channel queue.declare, rabbit_queue_type_util, rabbit_misc
// assert_args_equivalence), confirmed against RabbitMQ 3.10.8 where it
// agrees (integration/qargs_test.go). The 3.10.8 differences Warren does
// not follow:
//
//   - x-queue-type "" is the default type in 4.x; 3.10 refuses it with
//     "unsupported queue type ''".
//   - x-queue-version 1 is refused in 4.x ("unsupported queue version '1'");
//     3.10 accepts 1 and 2.
//   - x-queue-mode is not validated in 4.x; 3.10 refuses values other than
//     default and lazy.
//   - 4.x stores x-queue-type (the default injected) for every queue, so a
//     classic queue declared without it and redeclared as quorum reports
//     "received 'quorum' but current is 'classic'"; 3.10 reports "received
//     the value 'quorum' of type 'longstr' but current is none".

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/erlterm"
)

// Queue types (x-queue-type).
const (
	QueueTypeClassic = "classic"
	QueueTypeQuorum  = "quorum"
	QueueTypeStream  = "stream"
)

// queueTypeModule is RabbitMQ's module name for a queue type, as printed
// in its error texts.
var queueTypeModule = map[string]string{
	QueueTypeClassic: "rabbit_classic_queue",
	QueueTypeQuorum:  "rabbit_quorum_queue",
	QueueTypeStream:  "rabbit_stream_queue",
}

// queueTypeArgs are the arguments each queue type supports: validated at
// creation, compared at redeclare (RabbitMQ's capabilities/0 queue_arguments
// of rabbit_classic_queue, rabbit_quorum_queue and rabbit_stream_queue).
var queueTypeArgs = map[string][]string{
	QueueTypeClassic: {
		"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
		"x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
		"x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
		"x-queue-leader-locator",
		// Beyond RabbitMQ (design.md "Beyond RabbitMQ"): Warren offers the
		// delivery limit and 4.3's delayed retry on every queue type, so
		// classic queues accept these quorum-only keys instead of refusing
		// them with "invalid arg ... of queue type rabbit_classic_queue".
		"x-delivery-limit", "x-delayed-retry-type", "x-delayed-retry-min", "x-delayed-retry-max",
	},
	QueueTypeQuorum: {
		"x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
		"x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
		"x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
		"x-quorum-initial-group-size", "x-member-placement-tag", "x-delivery-limit",
		"x-message-ttl", "x-queue-leader-locator", "x-consumer-disconnected-timeout",
		"x-consumer-timeout", "x-delayed-retry-type", "x-delayed-retry-min", "x-delayed-retry-max",
	},
	QueueTypeStream: {
		"x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
		"x-stream-filter-size-bytes", "x-initial-cluster-size", "x-queue-leader-locator",
	},
}

// allQueueArgs is every argument some queue type supports; the others are
// ignored (R1.8).
var allQueueArgs = func() map[string]bool {
	m := map[string]bool{}
	for _, keys := range queueTypeArgs {
		for _, k := range keys {
			m[k] = true
		}
	}
	return m
}()

// MaxExpiry is the largest message TTL or queue expiry: ten years in
// milliseconds (rabbit_misc:check_expiry).
const MaxExpiry = 315_360_000_000

// maxSupportedPriority is RabbitMQ's ?MAX_SUPPORTED_PRIORITY.
const maxSupportedPriority = 255

// argCheck validates one argument; it returns "" or the Erlang error term
// as RabbitMQ prints it with ~p.
type argCheck func(v any, args amqp.Table) string

// declareArgChecks are RabbitMQ's declare_args() validators, in its order:
// when several arguments are invalid, the first in this list is reported.
// Arguments without a validator (x-delivery-limit, x-queue-mode,
// x-queue-master-locator, x-delayed-retry-*) are accepted as they are.
var declareArgChecks = []struct {
	key   string
	check argCheck
}{
	{"x-expires", checkExpiresArg},
	{"x-message-ttl", checkMessageTTLArg},
	{"x-dead-letter-exchange", checkStringArg},
	{"x-dead-letter-routing-key", checkDLRKArg},
	{"x-dead-letter-strategy", checkDLXStrategyArg},
	{"x-max-length", checkNonNegIntArg},
	{"x-max-length-bytes", checkNonNegIntArg},
	{"x-max-in-memory-length", checkNonNegIntArg},
	{"x-max-in-memory-bytes", checkNonNegIntArg},
	{"x-max-priority", checkMaxPriorityArg},
	{"x-overflow", checkOverflowArg},
	{"x-queue-version", checkQueueVersionArg},
	{"x-single-active-consumer", checkBoolArg},
	{"x-consumer-timeout", checkNonNegIntArg},
	{"x-consumer-disconnected-timeout", checkNonNegIntArg},
	{"x-queue-type", checkQueueTypeArg},
	{"x-quorum-initial-group-size", checkClusterSizeArg},
	{"x-max-age", checkMaxAgeArg},
	{"x-stream-max-segment-size-bytes", checkNonNegIntArg},
	{"x-stream-filter-size-bytes", checkNonNegIntArg},
	{"x-initial-cluster-size", checkClusterSizeArg},
	{"x-queue-leader-locator", checkLeaderLocatorArg},
	{"x-member-placement-tag", checkPlacementTagArg},
}

// queueTypeOf returns the queue type named by args: absent, "" and
// "undefined" mean the default, classic. The value is not validated.
func queueTypeOf(args amqp.Table) string {
	v, ok := args["x-queue-type"]
	if !ok {
		return QueueTypeClassic
	}
	if s, _ := v.(string); s != "" && s != "undefined" {
		return s
	}
	return QueueTypeClassic
}

// ValidateQueueDeclare checks a queue.declare that creates queue name in
// vhost, as RabbitMQ does (R1.1-R1.9): the x-dead-letter-exchange type
// first (rabbit_channel), then x-queue-type, then each argument the type
// supports in declare_args order, then arguments of other types, then the
// durable/exclusive/auto-delete properties quorum and stream queues need.
// It returns nil or a 406 PRECONDITION_FAILED error.
func ValidateQueueDeclare(name, vhost string, s QueueSpec) *amqp.Error {
	args := s.Args
	what := fmt.Sprintf("queue '%s' in vhost '%s'", name, vhost)
	// R1.4: rabbit_channel checks the DLX type before rabbit_amqqueue:declare.
	if v, ok := args["x-dead-letter-exchange"]; ok {
		if _, isStr := v.(string); !isStr {
			return amqp.Errorf(amqp.PreconditionFailed, "invalid type '%s' for arg 'x-dead-letter-exchange' in %s", argTypeName(v), what)
		}
	}
	invalid := func(key, term string) *amqp.Error {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for %s: %s", key, what, term)
	}
	// R1.7
	if v, ok := args["x-queue-type"]; ok {
		if term := checkQueueTypeArg(v, args); term != "" {
			return invalid("x-queue-type", term)
		}
	}
	typ := queueTypeOf(args)
	supported := queueTypeArgs[typ]
	// R1.2, R1.3, R1.5, R1.6
	for _, c := range declareArgChecks {
		v, ok := args[c.key]
		if !ok || !slices.Contains(supported, c.key) {
			continue
		}
		if term := c.check(v, args); term != "" {
			return invalid(c.key, term)
		}
	}
	// R1.8: RabbitMQ walks the table in wire order; amqp.Table keeps no
	// order, so the first foreign key by name is reported.
	keys := make([]string, 0, len(args))
	for k := range args {
		if allQueueArgs[k] && !slices.Contains(supported, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		slices.Sort(keys)
		return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for %s of queue type %s", keys[0], what, queueTypeModule[typ])
	}
	// R1.9: rabbit_quorum_queue:declare and rabbit_stream_queue:declare
	// (rabbit_queue_type_util checks, in this order).
	if typ == QueueTypeQuorum || typ == QueueTypeStream {
		switch {
		case s.AutoDelete:
			return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'auto-delete' for %s", what)
		case s.Exclusive:
			return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'exclusive-owner' for %s", what)
		case !s.Durable:
			return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'non-durable' for %s", what)
		}
	}
	return nil
}

// checkServerNamed refuses a server-named queue of a type that does not
// allow one (rabbit_channel, before the name is generated).
func checkServerNamed(args amqp.Table) *amqp.Error {
	switch typ := queueTypeOf(args); typ {
	case QueueTypeQuorum, QueueTypeStream:
		return amqp.Errorf(amqp.PreconditionFailed, "Cannot declare a server-named queue for type %s", queueTypeModule[typ])
	}
	return nil
}

// argTypeName is RabbitMQ's name for the field type of v.
func argTypeName(v any) string {
	if t := erlterm.FieldType(v); t != "" {
		return t
	}
	return "unknown"
}

func intArgTerm(v any) (int64, string) {
	n, ok := IntArg(v)
	if !ok {
		return 0, erlterm.Charlist("expected integer, got " + argTypeName(v))
	}
	return n, ""
}

func checkNonNegIntArg(v any, _ amqp.Table) string {
	n, term := intArgTerm(v)
	if term == "" && n < 0 {
		return fmt.Sprintf("{value_negative,%d}", n)
	}
	return term
}

func checkExpiry(n int64) string {
	switch {
	case n < 0:
		return fmt.Sprintf("{value_negative,%d}", n)
	case n > MaxExpiry:
		return fmt.Sprintf("{value_too_large,%d}", n)
	}
	return ""
}

func checkExpiresArg(v any, _ amqp.Table) string {
	n, term := intArgTerm(v)
	switch {
	case term != "":
		return term
	case n == 0:
		return "{value_zero,0}"
	}
	return checkExpiry(n)
}

func checkMessageTTLArg(v any, _ amqp.Table) string {
	n, term := intArgTerm(v)
	if term != "" {
		return term
	}
	return checkExpiry(n)
}

func checkMaxPriorityArg(v any, args amqp.Table) string {
	if term := checkNonNegIntArg(v, args); term != "" {
		return term
	}
	if n, _ := IntArg(v); n > maxSupportedPriority {
		return fmt.Sprintf("{max_value_exceeded,%d}", n)
	}
	return ""
}

func checkClusterSizeArg(v any, args amqp.Table) string {
	if term := checkNonNegIntArg(v, args); term != "" {
		return term
	}
	if n, _ := IntArg(v); n == 0 {
		return "{value_zero,0}"
	}
	return ""
}

func checkQueueVersionArg(v any, args amqp.Table) string {
	if term := checkNonNegIntArg(v, args); term != "" {
		return term
	}
	if n, _ := IntArg(v); n != 2 {
		return erlterm.Charlist(fmt.Sprintf("unsupported queue version '%d'", n))
	}
	return ""
}

func unacceptableType(v any) string {
	return "{unacceptable_type," + argTypeName(v) + "}"
}

func checkBoolArg(v any, _ amqp.Table) string {
	if _, ok := v.(bool); !ok {
		return unacceptableType(v)
	}
	return ""
}

func checkStringArg(v any, _ amqp.Table) string {
	if _, ok := v.(string); !ok {
		return unacceptableType(v)
	}
	return ""
}

func checkDLRKArg(v any, args amqp.Table) string {
	if _, ok := v.(string); !ok {
		return unacceptableType(v)
	}
	if _, ok := args["x-dead-letter-exchange"]; !ok {
		return "routing_key_but_no_dlx_defined"
	}
	return ""
}

// checkOneOf checks a longstr against a set of values.
func checkOneOf(v any, bad string, values ...string) string {
	s, ok := v.(string)
	if !ok {
		return unacceptableType(v)
	}
	if !slices.Contains(values, s) {
		return bad
	}
	return ""
}

func checkDLXStrategyArg(v any, _ amqp.Table) string {
	return checkOneOf(v, "invalid_dlx_strategy", "at-most-once", "at-least-once")
}

func checkOverflowArg(v any, _ amqp.Table) string {
	return checkOneOf(v, "invalid_overflow", "drop-head", "reject-publish", "reject-publish-dlx")
}

// checkLeaderLocatorArg: 4.x's locators, and the older names it still
// takes for balanced (rabbit_queue_location), which RabbitMQ's stream
// clients send ("least-leaders").
func checkLeaderLocatorArg(v any, _ amqp.Table) string {
	return checkOneOf(v, "invalid_queue_locator_arg", "client-local", "balanced", "random", "least-leaders")
}

func checkPlacementTagArg(v any, _ amqp.Table) string {
	s, ok := v.(string)
	switch {
	case !ok:
		return unacceptableType(v)
	case s == "":
		return "invalid_member_placement_tag_arg"
	}
	return ""
}

func checkQueueTypeArg(v any, _ amqp.Table) string {
	s, ok := v.(string)
	if !ok {
		return unacceptableType(v)
	}
	switch s {
	// "" and "undefined" are replaced by the default type before the
	// check (maybe_inject_default_queue_type_shortcut_into_args).
	case "", "undefined", QueueTypeClassic, QueueTypeQuorum, QueueTypeStream:
		return ""
	}
	return erlterm.Charlist("unsupported queue type '" + s + "'")
}

// checkMaxAgeArg is rabbit_amqqueue:check_max_age: digits, greater than
// zero, then exactly one unit of Y M D h m s.
func checkMaxAgeArg(v any, _ amqp.Table) string {
	s, ok := v.(string)
	if !ok {
		return unacceptableType(v)
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || strings.Trim(s[:i], "0") == "" {
		return "invalid_max_age"
	}
	switch s[i:] {
	case "Y", "M", "D", "h", "m", "s":
		return ""
	}
	return "invalid_max_age"
}

// queueArgsEquivalent checks a redeclare of queue q against its stored
// arguments (R1.10), as rabbit_amqqueue:assert_args_equivalence does:
// every argument q's type supports must be equivalent.
func queueArgsEquivalent(what string, q *Queue, got amqp.Table) error {
	typ := q.Config.Type
	if typ == "" {
		typ = QueueTypeClassic
	}
	for _, k := range queueTypeArgs[typ] {
		c, cok := q.Args[k]
		g, gok := got[k]
		if k == "x-queue-type" {
			// RabbitMQ 4.x stores the default type when the client gives
			// none (rabbit_amqqueue:augment_declare_args), on both sides.
			if !cok {
				c, cok = QueueTypeClassic, true
			}
			if !gok {
				g, gok = QueueTypeClassic, true
			}
		}
		switch {
		case !cok && !gok:
			continue
		case cok && gok:
			if argValueEquivalent(c, g) {
				continue
			}
			return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for %s: received '%s' but current is '%s'", k, what, erlterm.Val(g), erlterm.Val(c))
		}
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for %s: received %s but current is %s", k, what, describeTypedArg(g, gok), describeTypedArg(c, cok))
	}
	return nil
}

// argValueEquivalent is rabbit_misc:assert_args_equivalence1 for two
// present values: the same type class (all integer widths are one class,
// float and double another) and == values, or identical (=:=) values of
// any types, such as a longstr and a binary with the same bytes. An
// integer never equals a float.
func argValueEquivalent(a, b any) bool {
	if !headerValueEqual(a, b) {
		return false
	}
	_, _, aInt := erlNumberOf(a)
	_, _, bInt := erlNumberOf(b)
	if erlClass(a) == erlNumber && aInt != bInt {
		return false
	}
	return true
}

func describeTypedArg(v any, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("the value '%s' of type '%s'", erlterm.Val(v), argTypeName(v))
}

// QueueArgs is the parsed form of a queue's arguments, after validation.
// A pointer field is nil when its argument is absent (or, for the
// unvalidated x-delivery-limit and x-delayed-retry-min/-max, not an
// integer).
type QueueArgs struct {
	// Type is classic, quorum or stream.
	Type string
	// DLX is x-dead-letter-exchange ("" = the default exchange); DLRK is
	// x-dead-letter-routing-key.
	DLX, DLRK *string
	// DeadLetterStrategy is at-most-once (the default) or at-least-once
	// (quorum queues only, R1.6).
	DeadLetterStrategy string
	// MessageTTL and Expires are milliseconds.
	MessageTTL, Expires       *int64
	MaxLength, MaxLengthBytes *int64
	// Overflow is drop-head (the default), reject-publish or
	// reject-publish-dlx.
	Overflow string
	// DeliveryLimit is x-delivery-limit when it is an integer; negative
	// means unlimited (R1.9). Warren honours it on every queue type.
	DeliveryLimit *int64
	// DelayedRetryType is x-delayed-retry-type as given ("" when absent or
	// not a string); DelayedRetryMin/Max are x-delayed-retry-min/-max.
	DelayedRetryType                 string
	DelayedRetryMin, DelayedRetryMax *int64
	// MaxPriority is x-max-priority, 0 when absent (no priorities).
	MaxPriority  int
	SingleActive bool
	// Streams (issue 25): MaxAge is x-max-age as given ("7D"), SegmentBytes
	// x-stream-max-segment-size-bytes, FilterSize
	// x-stream-filter-size-bytes.
	MaxAge       string
	SegmentBytes *int64
	FilterSize   *int64
}

// ParseQueueArgs returns the parsed form of validated queue arguments.
func ParseQueueArgs(t amqp.Table) QueueArgs {
	a := QueueArgs{Type: queueTypeOf(t), Overflow: "drop-head", DeadLetterStrategy: "at-most-once"}
	str := func(k string) *string {
		if s, ok := t[k].(string); ok {
			return &s
		}
		return nil
	}
	num := func(k string) *int64 {
		if n, ok := IntArg(t[k]); ok {
			return &n
		}
		return nil
	}
	a.DLX, a.DLRK = str("x-dead-letter-exchange"), str("x-dead-letter-routing-key")
	if s := str("x-dead-letter-strategy"); s != nil {
		a.DeadLetterStrategy = *s
	}
	a.MessageTTL, a.Expires = num("x-message-ttl"), num("x-expires")
	a.MaxLength, a.MaxLengthBytes = num("x-max-length"), num("x-max-length-bytes")
	if s := str("x-overflow"); s != nil {
		a.Overflow = *s
	}
	a.DeliveryLimit = num("x-delivery-limit")
	if s := str("x-delayed-retry-type"); s != nil {
		a.DelayedRetryType = *s
	}
	a.DelayedRetryMin, a.DelayedRetryMax = num("x-delayed-retry-min"), num("x-delayed-retry-max")
	if p := num("x-max-priority"); p != nil {
		a.MaxPriority = int(min(max(*p, 0), maxSupportedPriority))
	}
	a.SingleActive, _ = t["x-single-active-consumer"].(bool)
	if s := str("x-max-age"); s != nil {
		a.MaxAge = *s
	}
	a.SegmentBytes, a.FilterSize = num("x-stream-max-segment-size-bytes"), num("x-stream-filter-size-bytes")
	return a
}

// String is for logs.
func (a QueueArgs) String() string {
	var b strings.Builder
	b.WriteString(a.Type)
	p := func(name string, v *int64) {
		if v != nil {
			b.WriteString(" " + name + "=" + strconv.FormatInt(*v, 10))
		}
	}
	if a.DLX != nil {
		fmt.Fprintf(&b, " dlx=%q", *a.DLX)
	}
	if a.DLRK != nil {
		fmt.Fprintf(&b, " dlrk=%q", *a.DLRK)
	}
	p("ttl", a.MessageTTL)
	p("expires", a.Expires)
	p("max-length", a.MaxLength)
	p("max-length-bytes", a.MaxLengthBytes)
	p("delivery-limit", a.DeliveryLimit)
	return b.String()
}
