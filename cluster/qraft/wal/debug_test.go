package wal

import "fmt"

func (w *WAL) debugPos(p Pos) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.segs[p.Seg]
	fl := w.fwd[p.Seg]
	if s == nil {
		return fmt.Sprintf("no seg; fwd %d", len(fl))
	}
	var near []uint32
	for _, o := range s.offs {
		if int64(o&^deadBit) > int64(p.Off)-500 && int64(o&^deadBit) < int64(p.Off)+500 {
			near = append(near, o)
		}
	}
	return fmt.Sprintf("seg sealed=%v compacting=%v live=%d len=%d size=%d fwd=%d near=%x", s.sealed, s.compacting, s.live, len(s.offs), s.size, len(fl), near)
}
