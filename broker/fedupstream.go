package broker

import "github.com/warrenmq/warren/amqp"

// KindFederationUpstream is the exchange type RabbitMQ's federation plugin
// declares on an upstream for each federated exchange link (issue 24): a
// fanout that drops the messages that went round already, so that a
// downstream using Warren as its upstream stops loops as with RabbitMQ
// (rabbit_federation_upstream_exchange). Its arguments name the limit
// and the downstream: x-max-hops (required), x-downstream-name and
// x-downstream-vhost.
const KindFederationUpstream = "x-federation-upstream"

// upstreamFilter is an x-federation-upstream exchange's: a message is
// forwarded unless its x-received-from has max-hops entries or more, or
// one naming the downstream's cluster and vhost (it came from there).
type upstreamFilter struct {
	maxHops       int64
	dname, dvhost string
	hasName       bool
	hasVHost      bool
}

func newUpstreamFilter(args amqp.Table) *upstreamFilter {
	f := &upstreamFilter{}
	f.maxHops, _ = intArg(args["x-max-hops"])
	f.dname, f.hasName = args["x-downstream-name"].(string)
	f.dvhost, f.hasVHost = args["x-downstream-vhost"].(string)
	return f
}

// validateUpstreamArgs is RabbitMQ's check of the declaration.
func validateUpstreamArgs(args amqp.Table) error {
	v, ok := args["x-max-hops"]
	if !ok {
		return amqp.Errorf(amqp.PreconditionFailed, "Argument x-max-hops missing")
	}
	if _, isInt := intArg(v); !isInt {
		return amqp.Errorf(amqp.PreconditionFailed, "Argument x-max-hops must be of type long")
	}
	return nil
}

func intArg(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}

// forward reports whether a message with these headers goes on.
func (f *upstreamFilter) forward(headers amqp.Table) bool {
	hops, ok := headers["x-received-from"].([]any)
	if !ok {
		return true
	}
	if int64(len(hops)) >= f.maxHops {
		return false
	}
	if !f.hasName {
		return true
	}
	for _, h := range hops {
		t, ok := h.(amqp.Table)
		if !ok {
			continue
		}
		if name, _ := t["cluster-name"].(string); name != f.dname {
			continue
		}
		if vh, _ := t["vhost"].(string); !f.hasVHost || vh == f.dvhost {
			return false // it was there already
		}
	}
	return true
}
