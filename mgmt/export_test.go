package mgmt

// ErrNoQuorumForTest is the error a cluster's no-quorum failures wrap.
var ErrNoQuorumForTest = errNoQuorum
