package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"runtime"
)

// startPprof serves the runtime profiles (go tool pprof
// http://ADDR/debug/pprof/profile) on their own mux, never the management
// listener.
func startPprof(addr string, log *slog.Logger) {
	// Lock contention and blocking are sampled too (/debug/pprof/mutex,
	// /debug/pprof/block), at a small cost, only when profiling is on.
	runtime.SetMutexProfileFraction(10)
	runtime.SetBlockProfileRate(100_000)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() {
		if err := http.ListenAndServe(addr, mux); err != nil {
			log.Error("pprof listener", "addr", addr, "err", err)
		}
	}()
	log.Info("pprof listening", "addr", addr)
}
