package main

// Cluster configuration (issue 13): the --node-name and --cluster-* flags,
// validated into a cluster.Config. Without --cluster-listen the broker is
// a single node, exactly as before.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"

	"github.com/warrenmq/warren/cluster"
)

// clusterOptions are the cluster flags.
type clusterOptions struct {
	NodeName   string
	Listen     string
	Advertise  string
	Peers      string
	Secret     string
	SecretFile string
	TLSCert    string
	TLSKey     string
	TLSCA      string
	Join       bool
}

// defaultNodeName is "warren@" and the short host name, as RabbitMQ's
// rabbit@host.
func defaultNodeName() string {
	host, _ := os.Hostname()
	if i := strings.IndexByte(host, '.'); i > 0 {
		host = host[:i]
	}
	if host == "" {
		host = "localhost"
	}
	return "warren@" + host
}

func addClusterFlags(fs *flag.FlagSet, c *clusterOptions) {
	fs.StringVar(&c.NodeName, "node-name", defaultNodeName(), "this node's name in a cluster (name@host, as RabbitMQ's rabbit@host)")
	fs.StringVar(&c.Listen, "cluster-listen", "", "inter-node listen address (host:port); empty: a single node, no clustering")
	fs.StringVar(&c.Advertise, "cluster-advertise", "", "inter-node address other nodes dial (default: this node's entry in --cluster-peers, else --cluster-listen)")
	fs.StringVar(&c.Peers, "cluster-peers", "", "the cluster's nodes, comma-separated name=host:port (this node may be among them)")
	fs.StringVar(&c.Secret, "cluster-secret", "", "shared secret every node of the cluster presents (RabbitMQ's Erlang cookie); prefer --cluster-secret-file")
	fs.StringVar(&c.SecretFile, "cluster-secret-file", "", "file holding the cluster secret (should be readable by its owner only)")
	fs.StringVar(&c.TLSCert, "cluster-tls-cert", "", "PEM certificate for inter-node TLS (with --cluster-tls-key and --cluster-tls-ca: mutual TLS)")
	fs.StringVar(&c.TLSKey, "cluster-tls-key", "", "PEM private key for inter-node TLS")
	fs.StringVar(&c.TLSCA, "cluster-tls-ca", "", "PEM CA certificates that inter-node peers' certificates must chain to")
	fs.BoolVar(&c.Join, "cluster-join", false, "start empty and wait to be added to a running cluster (warren cluster join NAME HOST:PORT on one of its nodes)")
}

// validNodeName checks the name@host form (cluster.ValidNodeName).
func validNodeName(name string) error { return cluster.ValidNodeName(name) }

// validAddr checks host:port with a port.
func validAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if port == "" {
		return errors.New("no port")
	}
	return nil
}

// parsePeers parses "name=host:port,name=host:port".
func parsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, addr, ok := strings.Cut(entry, "=")
		name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
		if !ok || addr == "" {
			return nil, fmt.Errorf("--cluster-peers: %q: want name@host=host:port", entry)
		}
		if err := validNodeName(name); err != nil {
			return nil, fmt.Errorf("--cluster-peers: %w", err)
		}
		if err := validAddr(addr); err != nil {
			return nil, fmt.Errorf("--cluster-peers: %s: address %q: %v", name, addr, err)
		}
		if _, dup := peers[name]; dup {
			return nil, fmt.Errorf("--cluster-peers: node %s is listed twice", name)
		}
		peers[name] = addr
	}
	return peers, nil
}

// clusterConfig validates the cluster flags. It returns nil (and no error)
// for a single node: no --cluster-listen and no other cluster flag. log
// gets warnings (a secret file readable by others).
func clusterConfig(c clusterOptions, dataDir string, log *slog.Logger) (*cluster.Config, error) {
	if c.Listen == "" {
		for _, f := range []struct{ name, val string }{
			{"--cluster-peers", c.Peers}, {"--cluster-advertise", c.Advertise},
			{"--cluster-secret", c.Secret}, {"--cluster-secret-file", c.SecretFile},
			{"--cluster-tls-cert", c.TLSCert}, {"--cluster-tls-key", c.TLSKey}, {"--cluster-tls-ca", c.TLSCA},
		} {
			if f.val != "" {
				return nil, fmt.Errorf("%s needs --cluster-listen (a node without it is a single node)", f.name)
			}
		}
		if c.Join {
			return nil, errors.New("--cluster-join needs --cluster-listen")
		}
		return nil, nil
	}
	if err := validNodeName(c.NodeName); err != nil {
		return nil, fmt.Errorf("--node-name: %w", err)
	}
	if err := validAddr(c.Listen); err != nil {
		return nil, fmt.Errorf("--cluster-listen %q: %v", c.Listen, err)
	}
	if c.Advertise != "" {
		if err := validAddr(c.Advertise); err != nil {
			return nil, fmt.Errorf("--cluster-advertise %q: %v", c.Advertise, err)
		}
	}
	all, err := parsePeers(c.Peers)
	if err != nil {
		return nil, err
	}
	advertise := c.Advertise
	if self, ok := all[c.NodeName]; ok && advertise == "" {
		advertise = self
	}
	if advertise == "" {
		advertise = c.Listen
	}
	peers := map[string]string{}
	for name, addr := range all {
		if name != c.NodeName {
			peers[name] = addr
		}
	}
	secret, err := clusterSecret(c, log)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := clusterTLS(c)
	if err != nil {
		return nil, err
	}
	return &cluster.Config{Node: c.NodeName, Listen: c.Listen, Advertise: advertise, Peers: peers,
		Secret: secret, TLS: tlsCfg, Join: c.Join, DataDir: dataDir, Logger: log}, nil
}

func clusterSecret(c clusterOptions, log *slog.Logger) ([]byte, error) {
	switch {
	case c.Secret != "" && c.SecretFile != "":
		return nil, errors.New("give --cluster-secret or --cluster-secret-file, not both")
	case c.Secret != "":
		return []byte(c.Secret), nil
	case c.SecretFile != "":
		fi, err := os.Stat(c.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("--cluster-secret-file: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 && log != nil {
			log.Warn("cluster secret file is readable by others than its owner; chmod 600 it", "file", c.SecretFile, "mode", fi.Mode().Perm().String())
		}
		data, err := os.ReadFile(c.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("--cluster-secret-file: %w", err)
		}
		s := strings.TrimSpace(string(data))
		if s == "" {
			return nil, fmt.Errorf("--cluster-secret-file %s is empty", c.SecretFile)
		}
		return []byte(s), nil
	}
	return nil, errors.New("clustering (--cluster-listen) needs a shared secret: set --cluster-secret-file (or --cluster-secret, WARREN_CLUSTER_SECRET) to the same value on every node")
}

// clusterTLS builds the inter-node mutual TLS configuration: this node's
// certificate, presented both as server and as client, and the CA that
// peers' certificates must chain to.
func clusterTLS(c clusterOptions) (*tls.Config, error) {
	if c.TLSCert == "" && c.TLSKey == "" && c.TLSCA == "" {
		return nil, nil
	}
	if c.TLSCert == "" || c.TLSKey == "" || c.TLSCA == "" {
		return nil, errors.New("inter-node TLS is mutual: give --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca together")
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: %w", err)
	}
	pem, err := os.ReadFile(c.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("--cluster-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--cluster-tls-ca %s: no PEM certificate in it", c.TLSCA)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// peerNames lists a peer map's names, sorted (for logs).
func peerNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
