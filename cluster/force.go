package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/warrenmq/warren/cluster/meta"
)

// Recovery from a lost majority (issue 22): warren node force-boot marks
// the data directory, and the next start runs with
// Config.ForceNewCluster. As etcd's --force-new-cluster and RabbitMQ's
// force_boot with force_shrink_member_to_current_member:
//
//   - the metadata group's log gets the removal of every other member,
//     committed, and the node leads it alone (meta.ForceNewCluster);
//   - each quorum queue group the node has a member of is shrunk to it
//     the same way (qraft.Config.ForceAlone);
//   - once the node leads, the queue records follow: those quorum queues
//     have this node as their only member; the queues with no replica
//     here are reported lost.
//
// What it may lose, said plainly in docs/cluster.md: whatever only the
// lost nodes had (definition changes and messages that never reached
// this node, and every queue without a replica here). It keeps every
// entry this node has, committed or not.

// forceMeta rewrites the metadata group's log before it opens.
func (n *Node) forceMeta() error {
	removed, err := meta.ForceNewCluster(n.cfg.DataDir, n.cfg.Node)
	if err != nil {
		return err
	}
	n.log.Warn("cluster: forced start: this node is now the only member of its cluster", "removed", removed)
	return nil
}

// forceRecords shrinks the queue records once this node leads the
// metadata group, retrying until it could change them all.
func (n *Node) forceRecords() {
	n.retry("forced start: changing the queue records", func() error {
		if n.group().Leader() != n.cfg.Node {
			return errNotYet
		}
		shrunk, lost, err := n.b.ForcedAlone()
		if len(shrunk) > 0 {
			n.log.Warn("cluster: forced start: quorum queues now have this node as their only member", "queues", shrunk)
		}
		if err != nil {
			return err
		}
		if len(lost) > 0 {
			n.log.Error("cluster: forced start: these queues had no replica on this node; their messages are lost with the lost nodes (delete and declare them again)", "queues", lost)
		}
		for name, qs := range n.qh.Forced() {
			n.log.Info("cluster: forced start: quorum group shrunk", "group", name, "removed", qs)
		}
		// Only now: a start that stops before this point runs the
		// recovery again (each step is a no-op when done).
		if err := ClearForceBoot(n.cfg.DataDir); err != nil {
			n.log.Error("cluster: removing the force-boot mark", "err", err)
		}
		return nil
	})
}

// ForceBootFile, in a node's data directory, asks its next start to
// recover from a lost majority (Config.ForceNewCluster); the node removes
// it once the queue records are shrunk too, so that the recovery runs
// once (and again, harmlessly, after a start that stopped before).
const ForceBootFile = "force-boot"

// MarkForceBoot is warren node force-boot: it marks dataDir, the data
// directory of a stopped cluster node, for a forced start.
func MarkForceBoot(dataDir string) error {
	if _, err := os.Stat(filepath.Join(dataDir, meta.FileName)); err != nil {
		return fmt.Errorf("%s is not the data directory of a cluster node: %w", dataDir, err)
	}
	return writeFileSync(filepath.Join(dataDir, ForceBootFile), []byte("force-boot: the next start recovers from a lost majority\n"))
}

// ForceBootMarked reports whether dataDir is marked for a forced start.
func ForceBootMarked(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, ForceBootFile))
	return err == nil
}

// ClearForceBoot removes the mark after a forced start succeeded.
func ClearForceBoot(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, ForceBootFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
