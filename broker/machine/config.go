package machine

// Overflow is what a queue does when a publish would exceed a length
// limit (R4.1 to R4.6).
type Overflow uint8

const (
	// DropHead drops (dead-letters) the oldest ready messages (R4.2).
	DropHead Overflow = iota
	// RejectPublish refuses the publish (R4.5).
	RejectPublish
	// RejectPublishDLX refuses the publish and dead-letters it (R4.6).
	RejectPublishDLX
)

// RetryType says which returns wait out a retry delay (R5.5).
type RetryType uint8

const (
	RetryNone RetryType = iota
	RetryAll
	RetryFailed
	RetryReturned
)

// Reason is why a message left its queue without being acked.
type Reason uint8

// The dead-letter reasons (R3.1), in the order of the broker's counters.
const (
	Rejected Reason = iota
	Expired
	MaxLen
	DeliveryLimit
)

// Config is a queue's effective settings, as the machine needs them.
// Durations are milliseconds; a negative value means "not set".
type Config struct {
	// Quorum selects the quorum queue rules: only failed returns count
	// toward the delivery limit, and returns go to the back while no
	// delivery limit is set (R5.3, R5.4).
	Quorum bool
	// Levels is the number of priority levels (x-max-priority + 1), fixed
	// at declaration; 0 or 1 means no priorities.
	Levels int
	// SingleActive is x-single-active-consumer, fixed at declaration.
	SingleActive bool
	// DLX says whether the queue has a dead-letter exchange: without one
	// messages leaving it are dropped, not dead-lettered.
	DLX            bool
	MessageTTL     int64
	Expires        int64
	MaxLength      int64
	MaxLengthBytes int64
	Overflow       Overflow
	// DeliveryLimit is the effective limit, -1 for none;
	// CountDeliveries says whether redeliveries carry x-delivery-count
	// and x-acquired-count.
	DeliveryLimit   int64
	CountDeliveries bool
	RetryType       RetryType
	RetryMin        int64
	RetryMax        int64
	// Dedup drops a publish whose publisher sequence number is not above
	// the last one seen from the same publisher (quorum queues, later).
	Dedup bool
}

// DefaultConfig is a classic queue with nothing set.
func DefaultConfig() Config {
	return Config{Levels: 1, MessageTTL: -1, Expires: -1, MaxLength: -1, MaxLengthBytes: -1,
		DeliveryLimit: -1, RetryMin: -1, RetryMax: -1}
}

// countsReturn reports whether a return bumps the delivery count: on
// quorum queues only failed deliveries (RabbitMQ 4.3), on others every
// return (R5.3, issue 11 item 15).
func (c *Config) countsReturn(failed bool) bool { return failed || !c.Quorum }

// retryDelay is the delay before a returned message with delivery count
// dc is ready again (R5.5): min(min × count, max) ms, 0 for none.
func (c *Config) retryDelay(dc uint32, failed bool) int64 {
	switch c.RetryType {
	case RetryAll:
	case RetryFailed:
		if !failed {
			return 0
		}
	case RetryReturned:
		if failed {
			return 0
		}
	default:
		return 0
	}
	if c.RetryMin < 0 {
		return 0
	}
	d := c.RetryMin * int64(max(dc, 1))
	if c.RetryMax >= 0 && d > c.RetryMax {
		d = c.RetryMax
	}
	return d
}

// ttl is the effective TTL of a message whose own TTL is msgTTL (-1 for
// none): the smaller of the two, -1 for none (R2.2).
func (c *Config) ttl(msgTTL int64) int64 {
	if c.MessageTTL >= 0 && (msgTTL < 0 || c.MessageTTL < msgTTL) {
		return c.MessageTTL
	}
	return msgTTL
}

func (c *Config) levels() int { return max(c.Levels, 1) }
