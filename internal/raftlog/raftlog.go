// Package raftlog is etcd raft's Logger on slog, for every raft Warren
// drives (cluster/meta, cluster/qraft, streamraft): raft's info is debug
// here, and a fatal or panic is logged as an error, then panics.
package raftlog

import (
	"fmt"
	"log/slog"
)

// Logger adapts L to raft.Logger.
type Logger struct{ L *slog.Logger }

func (r Logger) Debug(v ...any)              { r.L.Debug(fmt.Sprint(v...)) }
func (r Logger) Debugf(f string, v ...any)   { r.L.Debug(fmt.Sprintf(f, v...)) }
func (r Logger) Info(v ...any)               { r.L.Debug(fmt.Sprint(v...)) }
func (r Logger) Infof(f string, v ...any)    { r.L.Debug(fmt.Sprintf(f, v...)) }
func (r Logger) Warning(v ...any)            { r.L.Warn(fmt.Sprint(v...)) }
func (r Logger) Warningf(f string, v ...any) { r.L.Warn(fmt.Sprintf(f, v...)) }
func (r Logger) Error(v ...any)              { r.L.Error(fmt.Sprint(v...)) }
func (r Logger) Errorf(f string, v ...any)   { r.L.Error(fmt.Sprintf(f, v...)) }
func (r Logger) Fatal(v ...any)              { r.L.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r Logger) Fatalf(f string, v ...any)   { r.Fatal(fmt.Sprintf(f, v...)) }
func (r Logger) Panic(v ...any)              { r.Fatal(v...) }
func (r Logger) Panicf(f string, v ...any)   { r.Fatal(fmt.Sprintf(f, v...)) }
