package broker

import (
	"context"
	"slices"
	"sync"
	"time"
)

// TransferLeadershipsAway hands the leadership of every quorum queue this
// node leads to another online member, spreading them over the members
// (warren node drain, and a clustered node's SIGTERM, as RabbitMQ's
// rabbitmq-upgrade drain does). Each transfer waits at most wait; a queue
// whose other members are all offline keeps its leader. It returns how
// many moved and how many stayed.
func (b *Broker) TransferLeadershipsAway(ctx context.Context, wait time.Duration) (moved, stayed int) {
	type job struct {
		q  *Queue
		to string
	}
	var jobs []job
	load := map[string]int{} // leaderships handed to each node so far
	for _, vn := range b.VHosts() {
		v := b.VHost(vn)
		if v == nil {
			continue
		}
		for _, q := range v.Queues() {
			if q.qq == nil {
				continue
			}
			g, err := q.qq.leading()
			if err != nil {
				continue
			}
			to := ""
			members := q.qq.memberList()
			for _, m := range g.Status().Online {
				if m != b.node && slices.Contains(members, m) && (to == "" || load[m] < load[to]) {
					to = m
				}
			}
			if to == "" {
				stayed++
				continue
			}
			load[to]++
			jobs = append(jobs, job{q, to})
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			tctx, cancel := context.WithTimeout(ctx, wait)
			err := b.qqTransferLeader(tctx, j.q, j.to)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				b.log.Warn("quorum queue: leadership not handed over", "queue", j.q.Name, "vhost", j.q.vhost.Name, "to", j.to, "err", err)
				stayed++
				return
			}
			moved++
		}()
	}
	wg.Wait()
	if moved+stayed > 0 {
		b.log.Info("quorum queue leaderships handed over", "moved", moved, "stayed", stayed)
	}
	return moved, stayed
}
