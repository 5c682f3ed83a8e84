package main

import (
	"runtime"
	"syscall"
	"time"
)

// precisePacing prepares the calling goroutine for sub-millisecond
// sleeps: Go's timers wake about a millisecond late on this kind of
// machine, nanosleep(2) with the timer slack at 1ns within ~50µs. The
// goroutine keeps its OS thread.
func precisePacing() {
	runtime.LockOSThread()
	const prSetTimerslack = 29
	syscall.Syscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0)
}

// shortSleep sleeps d (short) precisely.
func shortSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}
