package store

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// FS is the file system a Log uses. It exists so that tests can substitute a
// file system that simulates crashes and torn writes (see MemFS); production
// code uses OSFS.
//
// Durability contract the Log relies on: File.Sync makes the file's data
// durable; FS.SyncDir makes the creation and removal of directory entries
// durable. Nothing else is assumed to be durable.
type FS interface {
	// MkdirAll creates dir and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// OpenFile opens name like os.OpenFile. Only the flags O_RDWR, O_RDONLY,
	// O_CREATE and O_EXCL are used.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes the file name.
	Remove(name string) error
	// ReadDir returns the names (not paths) of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// SyncDir makes the directory entries of dir durable (fsync of the
	// directory).
	SyncDir(dir string) error
}

// File is the part of *os.File a Log uses. ReadAt and WriteAt may be called
// concurrently on different ranges.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Size returns the current size of the file.
	Size() (int64, error)
	// Truncate changes the size of the file.
	Truncate(size int64) error
	// Sync makes the file's data durable (fdatasync on Linux).
	Sync() error
	Close() error
}

// OSFS is the real file system.
type OSFS struct{}

var _ FS = OSFS{}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osFile struct{ f *os.File }

func (f osFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f osFile) Truncate(size int64) error                { return f.f.Truncate(size) }
func (f osFile) Close() error                             { return f.f.Close() }
func (f osFile) Sync() error                              { return Datasync(f.f) }

func (f osFile) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// errCrashed is returned by files of a MemFS opened before its last Crash.
var errCrashed = errors.New("store: file handle predates a simulated crash")
