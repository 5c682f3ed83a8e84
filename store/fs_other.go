//go:build !linux

package store

import "os"

// Datasync flushes f to stable storage (fsync; fdatasync where available).
func Datasync(f *os.File) error { return f.Sync() }

// DefaultMaxOpenFiles is a bound for a FilePool.
func DefaultMaxOpenFiles() int { return 256 }
