// Command warren-perf is a load generator for AMQP 0-9-1 brokers (Warren,
// RabbitMQ), in the spirit of RabbitMQ's PerfTest and lavinmqperf.
//
// FIGURES_PLACEHOLDER
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "warren-perf:", err)
		os.Exit(1)
	}
}

// run is the whole command: "sink [flags]" runs the sink until ctx is
// done; otherwise it runs a load test and prints the results (text, or
// JSON with --json) to stdout, progress to stderr. A run that ends with
// errors (a channel or connection closed by the broker...) still prints
// its results, and returns an error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "sink" {
		return runSink(ctx, args[1:], stderr)
	}
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := runLoad(ctx, o, stderr)
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printText(stdout, res)
	}
	if len(res.Errors) > 0 {
		return errors.New(strings.Join(res.Errors, "; "))
	}
	return nil
}
