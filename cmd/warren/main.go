// Command warren runs the Warren message broker.
//
//	go run ./cmd/warren                   # AMQP on :5672, data in ./warren-data
//	go run ./cmd/warren --amqp-addr 127.0.0.1:5673
//
// Every flag can also be set in a config file (--config FILE, lines of
// "name = value" using the flag names) or in the environment as
// WARREN_<NAME> (WARREN_AMQP_ADDR=...). Flags win over the environment,
// which wins over the file.
//
// Without --cluster-listen Warren is a single node. A cluster node (issue
// 13; docs/cluster.md) has a name, an inter-node address, the peer list
// and the shared secret:
//
//	warren --node-name warren@a --cluster-listen 10.0.0.1:25672 \
//	    --cluster-peers warren@a=10.0.0.1:25672,warren@b=10.0.0.2:25672,warren@c=10.0.0.3:25672 \
//	    --cluster-secret-file /etc/warren/secret
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/warrenmq/warren/bridge"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/cluster"
	"github.com/warrenmq/warren/mgmt"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/streamserver"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "warren:", err)
		os.Exit(1)
	}
}

type options struct {
	AMQPAddr  string
	AMQPSAddr string
	// StreamAddr and StreamsAddr are the stream protocol's listeners
	// (plain and TLS); StreamHost and StreamPort what clients are told to
	// connect to.
	StreamAddr, StreamsAddr string
	StreamHost              string
	StreamPort              int
	HTTPAddr                string
	Shovels                 string
	PprofAddr               string
	DataDir                 string
	TLSCert                 string
	TLSKey                  string
	DefaultUser             string
	DefaultPass             string
	LogLevel                string
	Heartbeat               time.Duration
	FrameMax                uint
	ChannelMax              uint
	MemoryHigh              int64
	DiskFree                int64
	QueueWindow             int
	Definitions             string
	// StatsInterval and StatsRetention set the management API's sampling
	// of rates and depths and how long their history is kept.
	StatsInterval, StatsRetention time.Duration
	// HTTPMaxBody bounds a management API request's body (RabbitMQ's
	// management.http.max_body_size).
	HTTPMaxBody int64
	Cluster     clusterOptions
}

func newFlagSet(o *options, out io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("warren", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.AMQPAddr, "amqp-addr", ":5672", "AMQP listen address")
	fs.StringVar(&o.AMQPSAddr, "amqps-addr", ":5671", "AMQPS (TLS) listen address, used when --tls-cert and --tls-key are set")
	fs.StringVar(&o.StreamAddr, "stream-addr", ":5552", "stream protocol listen address (\"off\" disables it)")
	fs.StringVar(&o.StreamsAddr, "streams-addr", ":5551", "stream protocol over TLS listen address, used when --tls-cert and --tls-key are set")
	fs.StringVar(&o.StreamHost, "stream-advertised-host", "", "host stream clients are told to connect to (default: the address they reached)")
	fs.IntVar(&o.StreamPort, "stream-advertised-port", 0, "port stream clients are told to connect to (default: the port they reached)")
	fs.StringVar(&o.HTTPAddr, "http-addr", ":15672", "management HTTP API, web UI and /metrics listen address (\"off\" disables it)")
	fs.StringVar(&o.Shovels, "shovels", "", "static shovels: a JSON file {\"shovels\": [{\"name\", \"vhost\", \"user\", \"value\": a dynamic shovel's value}]}")
	fs.StringVar(&o.DataDir, "data-dir", "./warren-data", "data directory")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "PEM certificate file for AMQPS")
	fs.StringVar(&o.TLSKey, "tls-key", "", "PEM private key file for AMQPS")
	fs.StringVar(&o.DefaultUser, "default-user", "guest", "user created at start-up (loopback-only when it is guest)")
	fs.StringVar(&o.DefaultPass, "default-pass", "guest", "password of the default user")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.PprofAddr, "pprof-addr", "", "serve Go's net/http/pprof profiles on this address, for profiling (off by default)")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 60*time.Second, "heartbeat interval proposed to clients (0 disables)")
	fs.UintVar(&o.FrameMax, "frame-max", 131072, "largest frame accepted, in bytes")
	fs.UintVar(&o.ChannelMax, "channel-max", 2047, "highest channel number")
	fs.Int64Var(&o.MemoryHigh, "memory-high-watermark", 0, "block publishers while the broker uses more memory than this, in bytes (0: 40% of RAM, as RabbitMQ; -1: off)")
	fs.Int64Var(&o.DiskFree, "disk-free-limit", 50_000_000, "block publishers while the data directory's disk has less free space than this, in bytes (-1: off)")
	fs.IntVar(&o.QueueWindow, "queue-window", 2048, "ready messages a queue keeps in memory; the rest live on disk only (a sixteenth while memory is over half the watermark)")
	fs.DurationVar(&o.StatsInterval, "stats-interval", 5*time.Second, "how often the management API samples rates and queue depths (RabbitMQ's collect_statistics_interval)")
	fs.DurationVar(&o.StatsRetention, "stats-retention", mgmt.DefaultHistoryRetention, "how long the rate and depth history behind the UI's charts and msg_rates_age queries is kept")
	fs.Int64Var(&o.HTTPMaxBody, "http-max-body-size", mgmt.DefaultMaxBodySize, "largest management API request body, in bytes (RabbitMQ's management.http.max_body_size); a larger one is refused with 400")
	fs.StringVar(&o.Definitions, "definitions", "", "RabbitMQ definitions JSON file (rabbitmqctl export_definitions) to import at start-up")
	addClusterFlags(fs, &o.Cluster)
	cfgFile := fs.String("config", "", "config file of 'name = value' lines (flag names)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: warren [flags]\n\nWarren is an AMQP 0-9-1 message broker compatible with RabbitMQ clients.\n\nFlags (also WARREN_<FLAG_NAME> in the environment):\n")
		fs.PrintDefaults()
	}
	return fs, cfgFile
}

func run(args []string, out io.Writer) error {
	args = globalFirst(args)
	if len(args) > 0 && isCLICommand(args[0]) {
		return runCLI(args, os.Stdout, out)
	}
	var o options
	fs, cfgFile := newFlagSet(&o, out)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := applyConfig(fs, *cfgFile, os.Environ()); err != nil {
		return err
	}
	if err := checkStats(o.StatsInterval, o.StatsRetention); err != nil {
		return err
	}
	streamAddrSet := false
	fs.Visit(func(f *flag.Flag) { streamAddrSet = streamAddrSet || f.Name == "stream-addr" })
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	ccfg, err := clusterConfig(o.Cluster, o.DataDir, log)
	if err != nil {
		return err
	}
	if ccfg == nil && cluster.ForceBootMarked(o.DataDir) {
		return fmt.Errorf("%s is marked for a forced start (warren node force-boot): start the node with its cluster flags", o.DataDir)
	}
	node := ""
	if ccfg != nil {
		node = ccfg.Node
	}

	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return err
	}
	hb := o.Heartbeat
	if hb == 0 {
		hb = -1
	}
	// The broker owns the definitions and message stores in the data
	// directory: Open recovers the durable definitions and messages, and
	// Close (after the server's shutdown) closes the stores.
	b, err := broker.Open(broker.Config{Logger: log, DataDir: o.DataDir, QueueWindow: o.QueueWindow, Node: node})
	if err != nil {
		return err
	}
	cfg := server.Config{AMQPAddr: o.AMQPAddr, AMQPSAddr: o.AMQPSAddr, Heartbeat: hb, FrameMax: uint32(o.FrameMax),
		ChannelMax: uint16(o.ChannelMax), Logger: log, DataDir: o.DataDir,
		MemoryHighWatermark: o.MemoryHigh, DiskFreeLimit: o.DiskFree, Broker: b,
		ConnIDBase: b.RunConnIDBase()} // exclusive queues' owners are known cluster-wide
	if o.TLSCert != "" || o.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			b.Close()
			return fmt.Errorf("TLS: %w", err)
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		cfg.TLSCertFile = o.TLSCert
	}
	srv, err := server.New(cfg)
	if err != nil {
		b.Close()
		return err
	}
	var static []bridge.StaticShovel
	if o.Shovels != "" {
		data, err := os.ReadFile(o.Shovels)
		if err == nil {
			static, err = bridge.ParseStatic(data)
		}
		if err != nil {
			srv.Close()
			b.Close()
			return fmt.Errorf("--shovels %s: %w", o.Shovels, err)
		}
	}
	// Shovels and federation links run with or without the HTTP API.
	links := bridge.New(bridge.Config{Broker: b, Direct: srv.DialDirect, Node: b.NodeName(), Logger: log, Static: static})
	var ss *streamserver.Server
	if o.StreamAddr != "off" && o.StreamAddr != "" {
		scfg := streamserver.Config{Addr: o.StreamAddr, AdvertisedHost: o.StreamHost, AdvertisedPort: o.StreamPort, Logger: log}
		if cfg.TLS != nil {
			scfg.TLSAddr, scfg.TLS = o.StreamsAddr, cfg.TLS
		}
		ss = streamserver.New(b, scfg)
	}
	var mg *mgmt.Server
	if o.HTTPAddr != "off" && o.HTTPAddr != "" {
		mcfg := mgmt.Config{Server: srv, Addr: o.HTTPAddr, Logger: log, UI: mgmt.DefaultUI(), Links: links,
			SampleInterval: o.StatsInterval, HistoryRetention: o.StatsRetention, MaxBodySize: o.HTTPMaxBody}
		if ss != nil {
			mcfg.Streams = ss
		}
		mg = mgmt.New(mcfg)
	}
	var cn *cluster.Node
	// stop shuts the management API and the server down, leaves the
	// cluster, then closes the broker's stores: marked clean only if
	// every connection closed in time.
	stop := func(ctx context.Context) error {
		if mg != nil {
			mg.Close()
		}
		links.Close() // (its workers' connections close; their parameters stay)
		if ss != nil {
			ss.Close()
		}
		err := srv.Shutdown(ctx)
		if cn != nil {
			if cerr := cn.Close(); cerr != nil {
				log.Warn("leaving the cluster", "err", cerr)
			}
		}
		if err == nil {
			err = b.Close()
		} else {
			b.CloseUnclean()
		}
		return err
	}
	closeAll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stop(ctx)
	}
	// SIGTERM must mean a clean shutdown from the moment clients can
	// connect: a signal that comes while the rest starts up waits here.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	if ccfg != nil {
		// The node joins the cluster (transport, metadata group, remote
		// queues) before clients can connect, so every definition change
		// they make is replicated.
		ccfg.ForceNewCluster = cluster.ForceBootMarked(o.DataDir)
		if ccfg.ForceNewCluster {
			log.Warn("forced start (warren node force-boot): this node becomes the only member of its cluster and of its quorum queues")
		}
		ccfg.Links = links
		if ss != nil {
			ccfg.StreamEndpoint = streamEndpoint(o, ccfg.Advertise)
		}
		cn, err = cluster.Start(*ccfg, b, mg)
		if err != nil {
			closeAll()
			return fmt.Errorf("starting the cluster node: %w", err)
		}
		log.Info("cluster node started", "node", ccfg.Node, "listen", ccfg.Listen, "advertise", ccfg.Advertise,
			"peers", peerNames(ccfg.Peers), "join", ccfg.Join, "tls", ccfg.TLS != nil)
	}
	if err := setUp(b, o); err != nil {
		closeAll()
		return err
	}
	if err := srv.Start(); err != nil {
		closeAll()
		return err
	}
	amqpAddr := "none (in maintenance mode until 'warren node revive')"
	if a := srv.Addr(); a != nil {
		amqpAddr = a.String()
	}
	log.Info("Warren started", "version", server.Version, "amqp", amqpAddr, "data_dir", o.DataDir)
	links.Start()
	if ss != nil {
		if err := ss.Listen(); err != nil {
			// The default port taken (a RabbitMQ with its stream plugin
			// beside Warren) leaves Warren without streams over the stream
			// protocol, said loudly; an address asked for must be had.
			if streamAddrSet || !errors.Is(err, syscall.EADDRINUSE) {
				closeAll()
				return fmt.Errorf("stream listener: %w", err)
			}
			log.Warn("stream protocol listener not started: its default address is in use; set --stream-addr", "addr", o.StreamAddr, "err", err)
			ss.Close()
		}
	}
	if mg != nil {
		if err := mg.Start(); err != nil {
			closeAll()
			return fmt.Errorf("management HTTP listener: %w", err)
		}
	}
	if o.PprofAddr != "" {
		startPprof(o.PprofAddr, log)
	}
	if a := srv.TLSAddr(); a != nil {
		log.Info("AMQPS listener started", "addr", a.String())
	}

	s := <-sig
	log.Info("shutting down", "signal", s.String())
	if cn != nil {
		// A clustered node hands its quorum leaderships over first, so
		// that its queues' publishers and consumers wait for no
		// election, then closes its connections once their publishes
		// are confirmed (as warren node drain, without the mark).
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		moved, kept := b.TransferLeadershipsAway(hctx, 3*time.Second)
		if err := cn.Meta().TransferLeader(hctx); err != nil {
			log.Warn("the metadata leadership was not handed over", "err", err)
		}
		hcancel()
		left := srv.DrainConnections("broker forced connection closure with reason 'shutdown'", 5*time.Second)
		log.Info("handed over before shutting down", "quorum_leaders_moved", moved, "quorum_leaders_kept", kept, "connections_left", left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return stop(ctx)
}

// setUp replaces the default user on first boot only, as RabbitMQ's
// default_user (later boots keep whatever users were stored), and imports
// --definitions at every boot (existing queues and exchanges are kept).
func setUp(b *broker.Broker, o options) error {
	if b.FirstBoot() && (o.DefaultUser != "guest" || o.DefaultPass != "guest") {
		b.DeleteUser("guest")
		b.PutUser(o.DefaultUser, o.DefaultPass, []string{"administrator"})
		if err := b.SetPermissions("/", o.DefaultUser, broker.Permission{Configure: ".*", Write: ".*", Read: ".*"}); err != nil {
			return err
		}
	}
	return loadDefinitions(b, o.Definitions)
}

// maxStatsSamples bounds the history's samples per object (a day at 10 s).
const maxStatsSamples = 8640

// checkStats refuses a sampling interval or history retention the
// management API cannot keep: the history's memory grows with
// retention/interval samples per object.
func checkStats(interval, retention time.Duration) error {
	switch {
	case interval < 100*time.Millisecond:
		return fmt.Errorf("--stats-interval %s: must be at least 100ms", interval)
	case retention < interval:
		return fmt.Errorf("--stats-retention %s: must be at least --stats-interval (%s)", retention, interval)
	case retention/interval > maxStatsSamples:
		return fmt.Errorf("--stats-retention %s: at most %d samples of --stats-interval %s", retention, maxStatsSamples, interval)
	}
	return nil
}

// streamEndpoint is the stream endpoint ("host:port") the other nodes
// give stream clients for this one: --stream-advertised-host and -port,
// else the stream listener's address, its host taken from the cluster's
// advertised address when the listener names none.
func streamEndpoint(o options, clusterAdvertise string) string {
	host, port, err := net.SplitHostPort(o.StreamAddr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host, _, _ = net.SplitHostPort(clusterAdvertise)
	}
	if o.StreamHost != "" {
		host = o.StreamHost
	}
	if o.StreamPort != 0 {
		port = strconv.Itoa(o.StreamPort)
	}
	if host == "" || port == "" || port == "0" {
		return ""
	}
	return net.JoinHostPort(host, port)
}
