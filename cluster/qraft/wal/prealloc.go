package wal

import (
	"os"
	"path/filepath"
)

// Preallocation. fdatasync of a write that grows a file also commits the
// file system's journal (the new size, the new blocks); overwriting blocks
// that already hold data does not, and costs about half as much (measured
// on ext4, with writes of a few KiB; on this shared test machine the gain
// was from none to 2x, so it is opt-in). With Options.Preallocate (and not
// NoSync), a background goroutine
// prepares the next segment as a file of SegmentSize zero bytes, written
// and fsynced (spareName), and a roll renames it into place. The head's
// frames are followed by zeros, which read as the end of the log (a frame
// length of 0 is invalid). A roll cuts a preallocated segment to its
// frames before syncing it, so sealed segments keep no zeros. A head
// created without a spare (a new log, or the spare was not ready) is
// sealed early, at the next Append once a spare is ready.

const spareName = "wal-spare.tmp"

func (w *WAL) spareReady() bool {
	w.spareMu.Lock()
	defer w.spareMu.Unlock()
	return w.spareOK
}

// startSpare starts preparing the spare if preallocating and none is ready
// or being prepared.
func (w *WAL) startSpare() {
	if !w.prealloc {
		return
	}
	w.spareMu.Lock()
	defer w.spareMu.Unlock()
	if w.spareOK || w.spareBusy || w.spareStop {
		return
	}
	w.spareBusy = true
	w.spareWG.Add(1)
	go func() {
		defer w.spareWG.Done()
		err := w.makeSpare()
		w.spareMu.Lock()
		w.spareBusy = false
		w.spareOK = err == nil
		w.spareMu.Unlock()
		if err != nil && err != errSpareStopped {
			w.log.Warn("wal: preparing the next segment", "err", err)
		}
	}()
}

type spareErr string

func (e spareErr) Error() string { return string(e) }

const errSpareStopped = spareErr("stopped")

func (w *WAL) makeSpare() error {
	path := filepath.Join(w.o.Dir, spareName)
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	zero := make([]byte, min(int64(1<<20), w.o.SegmentSize))
	for off := int64(0); off < w.o.SegmentSize; off += int64(len(zero)) {
		w.spareMu.Lock()
		stop := w.spareStop
		w.spareMu.Unlock()
		if stop {
			os.Remove(path)
			return errSpareStopped
		}
		n := min(int64(len(zero)), w.o.SegmentSize-off)
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			os.Remove(path)
			return err
		}
	}
	if err := f.Sync(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// takeSpare renames the ready spare to path, or reports false.
func (w *WAL) takeSpare(path string) bool {
	w.spareMu.Lock()
	defer w.spareMu.Unlock()
	if !w.spareOK {
		return false
	}
	w.spareOK = false
	if err := os.Rename(filepath.Join(w.o.Dir, spareName), path); err != nil {
		w.log.Warn("wal: using the prepared segment", "err", err)
		return false
	}
	return true
}

// stopSpare stops the preparation and waits for it (Close).
func (w *WAL) stopSpare() {
	w.spareMu.Lock()
	w.spareStop = true
	w.spareMu.Unlock()
	w.spareWG.Wait()
}

// zerosFrom reports whether f holds only zero bytes from off to end.
func zerosFrom(f *os.File, off, end int64) (bool, error) {
	buf := make([]byte, 1<<20)
	for off < end {
		n := min(int64(len(buf)), end-off)
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return false, err
		}
		for _, b := range buf[:n] {
			if b != 0 {
				return false, nil
			}
		}
		off += n
	}
	return true, nil
}
