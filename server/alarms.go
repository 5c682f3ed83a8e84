package server

import (
	"bufio"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Resource alarms, as RabbitMQ raises them: while memory use is above the
// high watermark or the data directory's free disk space is below the
// limit, publishing connections are blocked (connection.blocked, and they
// are not read from) while consumers keep draining; connection.unblocked
// follows when every alarm has cleared. See Server.SetAlarm.

// monitorResources checks memory and disk every ResourceCheckInterval
// until the server stops.
func (s *Server) monitorResources() {
	t := time.NewTicker(s.cfg.ResourceCheckInterval)
	defer t.Stop()
	done := s.done()
	for {
		s.checkResources()
		select {
		case <-t.C:
		case <-done:
			return
		}
	}
}

func (s *Server) checkResources() {
	if w := s.cfg.MemoryHighWatermark; w > 0 {
		used := memoryUsed()
		if used > w && s.alarmRaised("memory") {
			// Raised already: collect first, so that memory drained by
			// consumers shows before deciding it is still high.
			runtime.GC()
			used = memoryUsed()
		}
		s.setAlarmLogged("memory", used > w, "used", used, "watermark", w)
		// From half the watermark (RabbitMQ's paging ratio) queues keep
		// fewer messages in memory.
		s.broker.SetMemoryPressure(used > w/2)
	}
	if limit := s.cfg.DiskFreeLimit; limit > 0 && s.cfg.DataDir != "" {
		if free, ok := diskFree(s.cfg.DataDir); ok {
			s.setAlarmLogged("disk", free < limit, "free", free, "limit", limit)
		}
	}
}

// AlarmRaised reports whether the named alarm ("memory", "disk") is raised.
func (s *Server) AlarmRaised(name string) bool { return s.alarmRaised(name) }

func (s *Server) alarmRaised(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alarms[name]
}

func (s *Server) setAlarmLogged(name string, on bool, kv ...any) {
	if s.alarmRaised(name) == on {
		return
	}
	if on {
		s.log.Warn(name+" resource limit alarm set; publishers will be blocked", kv...)
	} else {
		s.log.Info(name+" resource limit alarm cleared", kv...)
	}
	s.SetAlarm(name, on)
}

// done returns a channel closed when the server stops.
func (s *Server) done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.stopped = make(chan struct{})
	}
	return s.stopped
}

var memSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/memory/classes/heap/stacks:bytes"},
}

// memoryUsed is the memory the broker holds: heap objects, heap
// fragmentation and goroutine stacks (not memory the runtime has returned
// or can return to the OS).
func memoryUsed() int64 {
	s := make([]metrics.Sample, len(memSamples))
	copy(s, memSamples)
	metrics.Read(s)
	var total uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			total += v.Value.Uint64()
		}
	}
	return int64(total)
}

// totalMemory is the machine's memory from /proc/meminfo (or 1 GiB when
// it cannot be read).
func totalMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 1 << 30
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			if kb, err := strconv.ParseUint(fields[1], 10, 64); err == nil {
				return kb * 1024
			}
		}
	}
	return 1 << 30
}

// diskFree is the space available to the broker on dir's file system.
func diskFree(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// MemoryUsed reports the memory the memory alarm measures, for tests and
// operators choosing a watermark.
func MemoryUsed() int64 { return memoryUsed() }

// DiskFree reports the free space of the data directory's file system
// (false without a data directory or when it cannot be read).
func (s *Server) DiskFree() (int64, bool) {
	if s.cfg.DataDir == "" {
		return 0, false
	}
	return diskFree(s.cfg.DataDir)
}
