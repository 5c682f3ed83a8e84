package broker

import "sync/atomic"

// moveState is the broker's replays and moves (replay.go). Shovels, moves
// that keep running, are the bridge package's: they reach the broker as
// clients (issue 24).
type moveState struct {
	onPublish atomic.Pointer[func(vhost, exchange string, routed bool)]
}
