//go:build !linux

package main

import "time"

func precisePacing() {}

func shortSleep(d time.Duration) { time.Sleep(d) }
