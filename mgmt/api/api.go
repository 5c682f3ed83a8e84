// Package api holds the management API's objects as Go types, with
// RabbitMQ's JSON field names: what mgmt renders and what the warren CLI
// (cmd/warren) reads, so that a field's name and type live in one place.
//
// A field that RabbitMQ sends as null when it has no value is a pointer
// without omitempty; one it leaves out is omitempty. Tables of AMQP
// arguments and client properties stay map[string]any: their keys are the
// client's. Counters with their rates (message_stats) are MessageStats,
// whose keys depend on the object.
package api

import (
	"bytes"
	"encoding/json"
)

// Details is a counter's rate, and its history when the request asked
// for a range (samples, avg, avg_rate).
type Details struct {
	Rate    float64  `json:"rate"`
	Samples []Sample `json:"samples,omitempty"`
	Avg     *float64 `json:"avg,omitempty"`
	AvgRate *float64 `json:"avg_rate,omitempty"`
}

// Sample is one point of a Details history.
type Sample struct {
	Sample    uint64 `json:"sample"`
	Timestamp int64  `json:"timestamp"`
}

// MessageStats is an object's message_stats: each counter by name, and
// its Details as name+"_details".
type MessageStats map[string]any

// Queue is one of /api/queues.
type Queue struct {
	Name                      string         `json:"name"`
	VHost                     string         `json:"vhost"`
	Node                      string         `json:"node"`
	Type                      string         `json:"type"`
	State                     string         `json:"state"`
	Durable                   bool           `json:"durable"`
	AutoDelete                bool           `json:"auto_delete"`
	Exclusive                 bool           `json:"exclusive"`
	Arguments                 map[string]any `json:"arguments"`
	Policy                    *string        `json:"policy"`
	OperatorPolicy            *string        `json:"operator_policy"`
	EffectivePolicyDefinition map[string]any `json:"effective_policy_definition"`
	// Live is nil for a queue whose home node is down.
	*QueueLive
	// Quorum is set for a quorum queue, and for a stream (its leader,
	// members and online).
	*QueueQuorum
	// Stream is set for a stream.
	*QueueStream
}

// QueueStream is a stream's: RabbitMQ's readers (consumers by node) and
// segments, and Warren's stream, its log and its consumers' positions.
type QueueStream struct {
	Readers  map[string]int `json:"readers"`
	Segments int            `json:"segments"`
	Stream   *StreamLog     `json:"stream"`
}

// StreamLog is a stream's log (Warren's own): its offsets and
// timestamps (ms; null when empty), and each consumer's next offset and
// lag (the records it has yet to read).
type StreamLog struct {
	Bytes           int64            `json:"bytes"`
	FirstOffset     *uint64          `json:"first_offset"`
	LastChunkID     *uint64          `json:"last_chunk_id"`
	NextOffset      uint64           `json:"next_offset"`
	CommittedOffset uint64           `json:"committed_offset"`
	FirstTimestamp  *int64           `json:"first_timestamp"`
	LastTimestamp   *int64           `json:"last_timestamp"`
	Chunks          int              `json:"chunks"`
	DamagedChunks   uint64           `json:"damaged_chunks"`
	Consumers       []StreamPosition `json:"consumers"`
}

// StreamPosition is an AMQP 0-9-1 consumer's place in a stream.
type StreamPosition struct {
	ConsumerTag string `json:"consumer_tag"`
	Offset      uint64 `json:"offset"`
	Lag         uint64 `json:"lag"`
}

// QueueLive is what a queue's home node reports of it.
type QueueLive struct {
	ExclusiveConsumerTag    *string    `json:"exclusive_consumer_tag"`
	OwnerPidDetails         *string    `json:"owner_pid_details"`
	Consumers               int        `json:"consumers"`
	ConsumerCapacity        float64    `json:"consumer_capacity"`
	ConsumerUtilisation     float64    `json:"consumer_utilisation"`
	ConsumerDetails         []Consumer `json:"consumer_details"`
	SingleActiveConsumerTag *string    `json:"single_active_consumer_tag"`

	Messages                   int            `json:"messages"`
	MessagesDetails            Details        `json:"messages_details"`
	MessagesReady              int            `json:"messages_ready"`
	MessagesReadyDetails       Details        `json:"messages_ready_details"`
	MessagesUnacknowledged     int            `json:"messages_unacknowledged"`
	MessagesUnackedDetails     Details        `json:"messages_unacknowledged_details"`
	MessagesRAM                int            `json:"messages_ram"`
	MessagesReadyRAM           int            `json:"messages_ready_ram"`
	MessagesUnacknowledgedRAM  int            `json:"messages_unacknowledged_ram"`
	MessagesPersistent         int            `json:"messages_persistent"`
	MessageBytesPersistent     int64          `json:"message_bytes_persistent"`
	MessagesPagedOut           int            `json:"messages_paged_out"`
	MessageBytes               int64          `json:"message_bytes"`
	MessageBytesReady          int64          `json:"message_bytes_ready"`
	MessageBytesUnacknowledged int64          `json:"message_bytes_unacknowledged"`
	MessageBytesRAM            int64          `json:"message_bytes_ram"`
	MessageBytesPagedOut       int64          `json:"message_bytes_paged_out"`
	MessageStats               MessageStats   `json:"message_stats"`
	HeadMessageTimestamp       *int64         `json:"head_message_timestamp"`
	Memory                     int64          `json:"memory"`
	RecoverableSlaves          []string       `json:"recoverable_slaves"`
	Reductions                 int            `json:"reductions"`
	ReductionsDetails          Details        `json:"reductions_details"`
	GarbageCollection          map[string]any `json:"garbage_collection"`
	IdleSince                  string         `json:"idle_since,omitempty"`

	// Warren's own: dead letters by reason, returns to the queue (a
	// requeue loop shows here), messages waiting for a retry delay.
	MessagesDeadLettered map[string]uint64 `json:"messages_dead_lettered"`
	MessagesRequeued     uint64            `json:"messages_requeued"`
	MessagesDelayed      int               `json:"messages_delayed"`
}

// QueueQuorum is a quorum queue's group: RabbitMQ's leader, members and
// online, and Warren's raft, the members' Raft metrics by node.
type QueueQuorum struct {
	Leader                   *string         `json:"leader"`
	Members                  []string        `json:"members"`
	Online                   []string        `json:"online"`
	OpenFiles                map[string]int  `json:"open_files"`
	MessagesDLX              *int            `json:"messages_dlx,omitempty"`
	MessageBytesDLX          *int64          `json:"message_bytes_dlx,omitempty"`
	SingleActiveConsumerCtag *string         `json:"single_active_consumer_ctag"`
	Raft                     map[string]Raft `json:"raft,omitempty"`
}

// Raft is one member's Raft metrics for a quorum queue
// (/api/queues/{vhost}/{name}/raft).
type Raft struct {
	Term          uint64 `json:"term"`
	CommitIndex   uint64 `json:"commit_index"`
	LastApplied   uint64 `json:"last_applied"`
	LastIndex     uint64 `json:"last_index"`
	SnapshotIndex uint64 `json:"snapshot_index"`
	LogBytes      int64  `json:"log_bytes"`
	LogEntries    uint64 `json:"log_entries"`
	Quiesced      bool   `json:"quiesced"`
	Leader        string `json:"leader"`
}

// Exchange is one of /api/exchanges.
type Exchange struct {
	Name                   string         `json:"name"`
	VHost                  string         `json:"vhost"`
	Type                   string         `json:"type"`
	Durable                bool           `json:"durable"`
	AutoDelete             bool           `json:"auto_delete"`
	Internal               bool           `json:"internal"`
	Arguments              map[string]any `json:"arguments"`
	UserWhoPerformedAction string         `json:"user_who_performed_action"`
	MessageStats           MessageStats   `json:"message_stats,omitempty"`
	Policy                 string         `json:"policy,omitempty"`
}

// Binding is one of /api/bindings.
type Binding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
	PropertiesKey   string         `json:"properties_key"`
}

// Connection is one of /api/connections.
type Connection struct {
	Name                   string         `json:"name"`
	Node                   string         `json:"node"`
	VHost                  string         `json:"vhost"`
	User                   string         `json:"user"`
	UserWhoPerformedAction string         `json:"user_who_performed_action"`
	State                  string         `json:"state"`
	Type                   string         `json:"type"`
	Protocol               string         `json:"protocol"`
	AuthMechanism          string         `json:"auth_mechanism"`
	SSL                    bool           `json:"ssl"`
	SSLProtocol            *string        `json:"ssl_protocol"`
	SSLKeyExchange         *string        `json:"ssl_key_exchange"`
	SSLCipher              *string        `json:"ssl_cipher"`
	SSLHash                *string        `json:"ssl_hash"`
	PeerCertIssuer         *string        `json:"peer_cert_issuer"`
	PeerCertSubject        *string        `json:"peer_cert_subject"`
	PeerCertValidity       *string        `json:"peer_cert_validity"`
	Host                   string         `json:"host"`
	Port                   int            `json:"port"`
	PeerHost               string         `json:"peer_host"`
	PeerPort               int            `json:"peer_port"`
	Channels               int            `json:"channels"`
	ChannelMax             uint16         `json:"channel_max"`
	FrameMax               uint32         `json:"frame_max"`
	Timeout                int            `json:"timeout"`
	ClientProperties       map[string]any `json:"client_properties"`
	UserProvidedName       *string        `json:"user_provided_name"`
	ConnectedAt            int64          `json:"connected_at"`
	RecvOct                uint64         `json:"recv_oct"`
	RecvOctDetails         Details        `json:"recv_oct_details"`
	SendOct                uint64         `json:"send_oct"`
	SendOctDetails         Details        `json:"send_oct_details"`
	RecvCnt                uint64         `json:"recv_cnt"`
	SendCnt                uint64         `json:"send_cnt"`
	SendPend               int            `json:"send_pend"`
	GarbageCollection      map[string]any `json:"garbage_collection"`
	Reductions             int            `json:"reductions"`
	ReductionsDetails      Details        `json:"reductions_details"`
}

// Channel is one of /api/channels.
type Channel struct {
	Name                   string            `json:"name"`
	Node                   string            `json:"node"`
	Number                 uint16            `json:"number"`
	VHost                  string            `json:"vhost"`
	User                   string            `json:"user"`
	UserWhoPerformedAction string            `json:"user_who_performed_action"`
	State                  string            `json:"state"`
	ConnectionDetails      ConnectionDetails `json:"connection_details"`
	Confirm                bool              `json:"confirm"`
	Transactional          bool              `json:"transactional"`
	ConsumerCount          int               `json:"consumer_count"`
	PrefetchCount          int               `json:"prefetch_count"`
	GlobalPrefetchCount    int               `json:"global_prefetch_count"`
	MessagesUnacknowledged int               `json:"messages_unacknowledged"`
	MessagesUnconfirmed    int               `json:"messages_unconfirmed"`
	MessagesUncommitted    int               `json:"messages_uncommitted"`
	AcksUncommitted        int               `json:"acks_uncommitted"`
	PendingRaftCommands    int               `json:"pending_raft_commands"`
	MessageStats           MessageStats      `json:"message_stats"`
	GarbageCollection      map[string]any    `json:"garbage_collection"`
	Reductions             int               `json:"reductions"`
	ReductionsDetails      Details           `json:"reductions_details"`
	IdleSince              string            `json:"idle_since,omitempty"`
}

// ConnectionDetails is a channel's connection.
type ConnectionDetails struct {
	Name     string `json:"name"`
	PeerHost string `json:"peer_host"`
	PeerPort int    `json:"peer_port"`
}

// Consumer is one of /api/consumers, and of a queue's consumer_details.
type Consumer struct {
	ConsumerTag    string         `json:"consumer_tag"`
	Exclusive      bool           `json:"exclusive"`
	AckRequired    bool           `json:"ack_required"`
	PrefetchCount  int            `json:"prefetch_count"`
	Active         bool           `json:"active"`
	ActivityStatus string         `json:"activity_status"`
	Arguments      map[string]any `json:"arguments"`
	Queue          QueueRef       `json:"queue"`
	ChannelDetails ChannelDetails `json:"channel_details"`
}

// QueueRef names a queue.
type QueueRef struct {
	Name  string `json:"name"`
	VHost string `json:"vhost"`
}

// ChannelDetails is a consumer's channel.
type ChannelDetails struct {
	Name           string `json:"name"`
	ConnectionName string `json:"connection_name"`
	Number         uint16 `json:"number"`
	Node           string `json:"node"`
	PeerHost       string `json:"peer_host"`
	PeerPort       int    `json:"peer_port"`
	User           string `json:"user"`
}

// User is one of /api/users.
type User struct {
	Name             string           `json:"name"`
	PasswordHash     string           `json:"password_hash"`
	HashingAlgorithm string           `json:"hashing_algorithm"`
	Tags             []string         `json:"tags"`
	Limits           map[string]int64 `json:"limits"`
}

// Permission is one of /api/permissions.
type Permission struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

// TopicPermission is one of /api/topic-permissions.
type TopicPermission struct {
	User     string `json:"user"`
	VHost    string `json:"vhost"`
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

// Policy is one of /api/policies and /api/operator-policies.
type Policy struct {
	VHost string `json:"vhost"`
	Name  string `json:"name"`
	PolicyValue
}

// PolicyValue is a policy without its names: an operator policy's value
// in /api/parameters.
type PolicyValue struct {
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Definition map[string]any `json:"definition"`
	Priority   int            `json:"priority"`
}

// Parameter is one of /api/parameters.
type Parameter struct {
	VHost     string `json:"vhost"`
	Component string `json:"component"`
	Name      string `json:"name"`
	Value     any    `json:"value"`
}

// ExchangeDetail is one exchange's GET: the list's fields and the
// per-exchange rates (empty in RabbitMQ's "basic" rates mode).
type ExchangeDetail struct {
	Exchange
	Incoming []any `json:"incoming"`
	Outgoing []any `json:"outgoing"`
}

// QueueDetail is one queue's GET (/api/queues/{vhost}/{name}): the list's
// fields and the per-exchange and per-channel rates (empty in RabbitMQ's
// "basic" rates mode, as here).
type QueueDetail struct {
	Queue
	Deliveries []any `json:"deliveries"`
	Incoming   []any `json:"incoming"`
}

// ChannelDetail is one channel's GET (/api/channels/{name}): the list's
// fields, its consumers, and the per-queue and per-exchange rates (empty
// in RabbitMQ's "basic" rates mode, as here).
type ChannelDetail struct {
	Channel
	ConsumerDetails []Consumer `json:"consumer_details"`
	Deliveries      []any      `json:"deliveries"`
	Publishes       []any      `json:"publishes"`
}

// TrackedConnection is one of /api/connections/username/{user}.
type TrackedConnection struct {
	Name  string `json:"name"`
	VHost string `json:"vhost"`
	User  string `json:"user"`
	Node  string `json:"node"`
}

// Shovel is one of /api/shovels: a shovel's status.
type Shovel struct {
	Node            string  `json:"node"`
	Name            string  `json:"name"`
	VHost           string  `json:"vhost"`
	Type            string  `json:"type"`
	State           string  `json:"state"`
	Timestamp       string  `json:"timestamp"`
	SrcProtocol     string  `json:"src_protocol,omitempty"`
	DestProtocol    string  `json:"dest_protocol,omitempty"`
	SrcURI          string  `json:"src_uri,omitempty"`
	DestURI         string  `json:"dest_uri,omitempty"`
	SrcQueue        string  `json:"src_queue,omitempty"`
	SrcExchange     string  `json:"src_exchange,omitempty"`
	SrcExchangeKey  *string `json:"src_exchange_key,omitempty"`
	DestQueue       string  `json:"dest_queue,omitempty"`
	DestExchange    string  `json:"dest_exchange,omitempty"`
	DestExchangeKey *string `json:"dest_exchange_key,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	// Forwarded counts the messages published to the destination
	// (RabbitMQ 4.1's field).
	Forwarded uint64 `json:"forwarded"`
}

// FederationLink is a federation link of GET /api/federation-links, as
// RabbitMQ 3.10's federation management plugin shows it.
type FederationLink struct {
	Node             string `json:"node"`
	Exchange         string `json:"exchange,omitempty"`
	UpstreamExchange string `json:"upstream_exchange,omitempty"`
	Queue            string `json:"queue,omitempty"`
	UpstreamQueue    string `json:"upstream_queue,omitempty"`
	ConsumerTag      string `json:"consumer_tag,omitempty"`
	Type             string `json:"type"`
	VHost            string `json:"vhost"`
	Upstream         string `json:"upstream"`
	ID               string `json:"id"`
	Status           string `json:"status"`
	LocalConnection  string `json:"local_connection,omitempty"`
	URI              string `json:"uri,omitempty"`
	Error            string `json:"error,omitempty"`
	Timestamp        string `json:"timestamp"`
}

// ClusterStatus is GET /api/cluster-status (Warren's; `warren
// cluster status` reads it, as rabbitmqctl cluster_status prints).
type ClusterStatus struct {
	Node        string          `json:"node"`
	ClusterName string          `json:"cluster_name"`
	ClusterID   string          `json:"cluster_id"`
	Leader      string          `json:"leader"`
	Members     []ClusterMember `json:"members"`
}

// ClusterMember is one member in ClusterStatus.
type ClusterMember struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Running bool   `json:"running"`
	Leader  bool   `json:"leader"`
}

// QueueMemberResult is one quorum queue of a shrink's answer (DELETE
// /api/queues/quorum/replicas/on/{node}/shrink) and of `warren queues
// grow|shrink`'s output, as rabbitmq-queues prints them.
type QueueMemberResult struct {
	VHost  string `json:"vhost"`
	Name   string `json:"name"`
	Size   int    `json:"size"`
	Result string `json:"result"`
}

// Node is one of /api/nodes. A member that does not answer shows its
// name, running false and no NodeLive.
type Node struct {
	Name         string `json:"name"`
	Type         string `json:"type"`
	Running      bool   `json:"running"`
	Partitions   []any  `json:"partitions"`
	BeingDrained bool   `json:"being_drained"`
	// Warren's own, in a cluster: whether it leads the metadata group,
	// and its inter-node address.
	Leader  *bool  `json:"leader,omitempty"`
	Address string `json:"address,omitempty"`
	*NodeLive
}

// NodeLive is what a running node reports of itself.
type NodeLive struct {
	OSPid                  string    `json:"os_pid"`
	MemUsed                int64     `json:"mem_used"`
	MemUsedDetails         Details   `json:"mem_used_details"`
	MemLimit               int64     `json:"mem_limit"`
	MemAlarm               bool      `json:"mem_alarm"`
	MemCalculationStrategy string    `json:"mem_calculation_strategy"`
	DiskFree               int64     `json:"disk_free"`
	DiskFreeDetails        Details   `json:"disk_free_details"`
	DiskFreeLimit          int64     `json:"disk_free_limit"`
	DiskFreeAlarm          bool      `json:"disk_free_alarm"`
	FDUsed                 int       `json:"fd_used"`
	FDUsedDetails          Details   `json:"fd_used_details"`
	FDTotal                int       `json:"fd_total"`
	SocketsUsed            int       `json:"sockets_used"`
	SocketsUsedDetails     Details   `json:"sockets_used_details"`
	SocketsTotal           int       `json:"sockets_total"`
	ProcUsed               int       `json:"proc_used"`
	ProcUsedDetails        Details   `json:"proc_used_details"`
	ProcTotal              int       `json:"proc_total"`
	RunQueue               int       `json:"run_queue"`
	Processors             int       `json:"processors"`
	Uptime                 int64     `json:"uptime"`
	RatesMode              string    `json:"rates_mode"`
	NetTicktime            int       `json:"net_ticktime"`
	ExchangeTypes          []Plugin  `json:"exchange_types"`
	AuthMechanisms         []Plugin  `json:"auth_mechanisms"`
	Applications           []App     `json:"applications"`
	EnabledPlugins         []string  `json:"enabled_plugins"`
	DBDir                  string    `json:"db_dir"`
	ConfigFiles            []string  `json:"config_files"`
	LogFiles               []string  `json:"log_files"`
	Contexts               []Context `json:"contexts"`
	QuorumQueuesRaft       any       `json:"quorum_queues_raft,omitempty"` // Warren's: the raft host's counters
}

// Plugin is an exchange type or an auth mechanism of a node.
type Plugin struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// InternalPurpose marks an exchange type a plugin uses for itself
	// (x-federation-upstream's "federation").
	InternalPurpose string `json:"internal_purpose,omitempty"`
	Enabled         bool   `json:"enabled"`
}

// App is an application a node runs.
type App struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Version     string `json:"version"`
}

// Context is a web context a node serves.
type Context struct {
	Node        string `json:"node,omitempty"`
	Description string `json:"description"`
	Path        string `json:"path"`
	Port        string `json:"port"`
}

// QuorumMember is one row of a quorum queue's status
// (/api/queues/quorum/{vhost}/{name}/status): RabbitMQ 4.x's keys, and
// Warren's log size.
type QuorumMember struct {
	Node           string `json:"Node Name"`
	RaftState      string `json:"Raft State"`
	Membership     string `json:"Membership"`
	LastLogIndex   uint64 `json:"Last Log Index"`
	LastWritten    uint64 `json:"Last Written"`
	LastApplied    uint64 `json:"Last Applied"`
	CommitIndex    uint64 `json:"Commit Index"`
	SnapshotIndex  uint64 `json:"Snapshot Index"`
	Term           uint64 `json:"Term"`
	MachineVersion int    `json:"Machine Version"`
	LogBytes       int64  `json:"Log Bytes"`
	LogEntries     uint64 `json:"Log Entries"`
}

// VHost is one of /api/vhosts. Its message counts are its queues'
// (absent when it has none, as RabbitMQ's); recv_oct and send_oct while
// it has connections.
type VHost struct {
	Name             string            `json:"name"`
	Description      string            `json:"description"`
	Tags             []string          `json:"tags"`
	DefaultQueueType string            `json:"default_queue_type"`
	Metadata         VHostMetadata     `json:"metadata"`
	Tracing          bool              `json:"tracing"`
	ClusterState     map[string]string `json:"cluster_state"`

	Messages                      *int     `json:"messages,omitempty"`
	MessagesDetails               *Details `json:"messages_details,omitempty"`
	MessagesReady                 *int     `json:"messages_ready,omitempty"`
	MessagesReadyDetails          *Details `json:"messages_ready_details,omitempty"`
	MessagesUnacknowledged        *int     `json:"messages_unacknowledged,omitempty"`
	MessagesUnacknowledgedDetails *Details `json:"messages_unacknowledged_details,omitempty"`

	MessageStats   MessageStats `json:"message_stats,omitempty"`
	RecvOct        *uint64      `json:"recv_oct,omitempty"`
	RecvOctDetails *Details     `json:"recv_oct_details,omitempty"`
	SendOct        *uint64      `json:"send_oct,omitempty"`
	SendOctDetails *Details     `json:"send_oct_details,omitempty"`
}

// VHostMetadata is a vhost's description and tags.
type VHostMetadata struct {
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
}

// Message is a message of a queue get (POST /api/queues/{vhost}/{name}/get),
// as RabbitMQ renders one.
type Message struct {
	Payload         string `json:"payload"`
	PayloadEncoding string `json:"payload_encoding"`
	PayloadBytes    int    `json:"payload_bytes"`
	Exchange        string `json:"exchange"`
	RoutingKey      string `json:"routing_key"`
	Redelivered     bool   `json:"redelivered"`
	MessageCount    *int   `json:"message_count,omitempty"` // get: the messages left
	// Properties by RabbitMQ's names; an empty set is [] (an empty
	// Erlang proplist), as RabbitMQ sends it.
	Properties Properties `json:"properties"`
}

// Browsed is a message of a dead-letter browse
// (/api/dead-letters/{vhost}/{queue}/messages, Warren's): its place in
// the queue, its decoded x-death, and when it expires.
type Browsed struct {
	Message
	Position   int         `json:"position"`
	XDeath     []Death     `json:"x_death"`
	FirstDeath *FirstDeath `json:"first_death,omitempty"`
	ExpiresAt  int64       `json:"expires_at,omitempty"` // ms since the epoch
}

// Properties are a message's properties; see Message.
type Properties map[string]any

// MarshalJSON writes no properties as [], as RabbitMQ.
func (p Properties) MarshalJSON() ([]byte, error) {
	if len(p) == 0 {
		return []byte("[]"), nil
	}
	return json.Marshal(map[string]any(p))
}

// UnmarshalJSON reads an object, or [] for none.
func (p *Properties) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "[]" {
		*p = nil
		return nil
	}
	return json.Unmarshal(b, (*map[string]any)(p))
}

// Death is one entry of the x-death header, by RabbitMQ's names.
type Death struct {
	Count       int64    `json:"count"`
	Reason      string   `json:"reason"`
	Queue       string   `json:"queue"`
	Time        any      `json:"time"` // seconds since the epoch (a number); a date string from other tools
	Exchange    string   `json:"exchange"`
	RoutingKeys []string `json:"routing-keys"`
	// OriginalExpiration is set when the message had its own TTL.
	OriginalExpiration *string `json:"original-expiration,omitempty"`
}

// FirstDeath is Warren's summary of a dead letter's first death.
type FirstDeath struct {
	Reason      string   `json:"reason"`
	Queue       string   `json:"queue"`
	Exchange    string   `json:"exchange"`
	RoutingKeys []string `json:"routing-keys"`
}

// Overview is GET /api/overview.
type Overview struct {
	ManagementVersion          string           `json:"management_version"`
	RatesMode                  string           `json:"rates_mode"`
	SampleRetentionPolicies    map[string][]int `json:"sample_retention_policies"`
	ExchangeTypes              []Plugin         `json:"exchange_types"`
	ProductVersion             string           `json:"product_version"`
	ProductName                string           `json:"product_name"`
	RabbitMQVersion            string           `json:"rabbitmq_version"`
	ClusterName                string           `json:"cluster_name"`
	ErlangVersion              string           `json:"erlang_version"`
	ErlangFullVersion          string           `json:"erlang_full_version"`
	ReleaseSeriesSupportStatus string           `json:"release_series_support_status"`
	DisableStats               bool             `json:"disable_stats"`
	EnableQueueTotals          bool             `json:"enable_queue_totals"`
	MessageStats               MessageStats     `json:"message_stats"`
	ChurnRates                 map[string]any   `json:"churn_rates"`
	QueueTotals                QueueTotals      `json:"queue_totals"`
	ObjectTotals               ObjectTotals     `json:"object_totals"`
	StatisticsDBEventQueue     int              `json:"statistics_db_event_queue"`
	Node                       string           `json:"node"`
	Listeners                  []Listener       `json:"listeners"`
	Contexts                   []Context        `json:"contexts"`
}

// QueueTotals are the overview's message counts over every queue.
type QueueTotals struct {
	Messages                      int     `json:"messages"`
	MessagesDetails               Details `json:"messages_details"`
	MessagesReady                 int     `json:"messages_ready"`
	MessagesReadyDetails          Details `json:"messages_ready_details"`
	MessagesUnacknowledged        int     `json:"messages_unacknowledged"`
	MessagesUnacknowledgedDetails Details `json:"messages_unacknowledged_details"`
}

// ObjectTotals are the overview's object counts.
type ObjectTotals struct {
	Channels    int `json:"channels"`
	Connections int `json:"connections"`
	Consumers   int `json:"consumers"`
	Exchanges   int `json:"exchanges"`
	Queues      int `json:"queues"`
}

// Listener is a protocol listener of a node.
type Listener struct {
	Node       string `json:"node"`
	Protocol   string `json:"protocol"`
	IPAddress  string `json:"ip_address"`
	Port       int    `json:"port"`
	SocketOpts []any  `json:"socket_opts"`
}

// DeadLetterQueue is one of /api/dead-letters (Warren's): a queue that
// dead-letter exchanges route to, or whose head holds a dead letter, with
// its dead letters counted by reason and by source queue (of the first
// ones, sampled, on a long queue).
type DeadLetterQueue struct {
	VHost                  string         `json:"vhost"`
	Name                   string         `json:"name"`
	Messages               int            `json:"messages"`
	MessagesReady          int            `json:"messages_ready"`
	MessagesUnacknowledged int            `json:"messages_unacknowledged"`
	Consumers              int            `json:"consumers"`
	Sources                []string       `json:"sources"`
	ByReason               map[string]int `json:"by_reason"`
	BySource               map[string]int `json:"by_source"`
	Sampled                bool           `json:"sampled"`
}

// DeadLetterPage is a page of a dead-letter browse
// (/api/dead-letters/{vhost}/{queue}/messages). With a filter, Total
// counts the matching messages among the first ones inspected, and
// Truncated says there were more.
type DeadLetterPage struct {
	Total     int       `json:"total"`
	Offset    int       `json:"offset"`
	Messages  []Browsed `json:"messages"`
	Truncated bool      `json:"truncated,omitempty"`
}

// ReplayResult is a replay's answer (POST
// /api/dead-letters/{vhost}/{queue}/replay).
type ReplayResult struct {
	Replayed  int    `json:"replayed"`
	Skipped   int    `json:"skipped"`
	Failed    int    `json:"failed"`
	Remaining int    `json:"remaining"`
	Error     string `json:"error,omitempty"`
	// NextOffset is, for a stream DLQ, the offset after the last record
	// read (a stream keeps its dead letters).
	NextOffset *uint64 `json:"next_offset,omitempty"`
}

// StreamConnection is one of /api/stream/connections (RabbitMQ's
// rabbitmq_stream_management).
type StreamConnection struct {
	AuthMechanism    string            `json:"auth_mechanism"`
	ChannelMax       int               `json:"channel_max"`
	Channels         int               `json:"channels"`
	ClientProperties map[string]string `json:"client_properties"`
	ConnectedAt      int64             `json:"connected_at"`
	FrameMax         uint32            `json:"frame_max"`
	Host             string            `json:"host"`
	Name             string            `json:"name"`
	Node             string            `json:"node"`
	PeerHost         string            `json:"peer_host"`
	PeerPort         int               `json:"peer_port"`
	Port             int               `json:"port"`
	Protocol         string            `json:"protocol"`
	RecvOct          uint64            `json:"recv_oct"`
	SendOct          uint64            `json:"send_oct"`
	SSL              bool              `json:"ssl"`
	State            string            `json:"state"`
	Timeout          int               `json:"timeout"`
	User             string            `json:"user"`
	UserProvidedName string            `json:"user_provided_name"`
	VHost            string            `json:"vhost"`
}

// StreamConnectionDetails is a stream publisher's or consumer's
// connection.
type StreamConnectionDetails struct {
	Name     string `json:"name"`
	Node     string `json:"node"`
	PeerHost string `json:"peer_host"`
	PeerPort int    `json:"peer_port"`
	User     string `json:"user"`
}

// StreamCounters are the stream protocol listener's message counters
// since it started (the Prometheus page's protocol="stream" samples).
type StreamCounters struct {
	Published, Confirmed, Errored, Delivered uint64
}

// StreamPublisher is one of /api/stream/publishers.
type StreamPublisher struct {
	ConnectionDetails StreamConnectionDetails `json:"connection_details"`
	Confirmed         uint64                  `json:"confirmed"`
	Errored           uint64                  `json:"errored"`
	Published         uint64                  `json:"published"`
	PublisherID       uint8                   `json:"publisher_id"`
	Queue             QueueRef                `json:"queue"`
	Reference         string                  `json:"reference"`
}

// StreamConsumer is one of /api/stream/consumers.
type StreamConsumer struct {
	ConnectionDetails StreamConnectionDetails `json:"connection_details"`
	Consumed          uint64                  `json:"consumed"`
	Credits           int                     `json:"credits"`
	Offset            uint64                  `json:"offset"`
	OffsetLag         uint64                  `json:"offset_lag"`
	Properties        map[string]string       `json:"properties"`
	Queue             QueueRef                `json:"queue"`
	SubscriptionID    uint8                   `json:"subscription_id"`
	// Active is false for a single active consumer waiting its turn.
	Active bool `json:"active"`
}
