package mgmt

// Typed replies of the management API that the CLI (cmd/warren) reads
// too (issue 23): a field's JSON name and type live here, once, for the
// handler that writes it and the client that reads it. The names are
// RabbitMQ's where RabbitMQ has the field.

// ClusterStatusReply is GET /api/cluster-status (Warren's; `warren
// cluster status` reads it, as rabbitmqctl cluster_status prints).
type ClusterStatusReply struct {
	Node        string               `json:"node"`
	ClusterName string               `json:"cluster_name"`
	ClusterID   string               `json:"cluster_id"`
	Leader      string               `json:"leader"`
	Members     []ClusterMemberReply `json:"members"`
}

// ClusterMemberReply is one member in ClusterStatusReply.
type ClusterMemberReply struct {
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
