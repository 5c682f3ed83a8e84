package store

import (
	"os"
	"syscall"
)

// Datasync flushes f's data (and the metadata needed to read it back, such
// as its size) to stable storage: fdatasync(2). The quorum queues' WAL
// (cluster/qraft/wal) uses it too.
func Datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// DefaultMaxOpenFiles is a bound for a FilePool: a quarter of the process's
// descriptor limit (RLIMIT_NOFILE, soft), between 16 and 512, which leaves
// the rest for connections and other files.
func DefaultMaxOpenFiles() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 256
	}
	return int(min(max(lim.Cur/4, 16), 512))
}
