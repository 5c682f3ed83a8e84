package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// parseClusterFlags runs the flags, environment and config file through
// newFlagSet and applyConfig as run does, then clusterConfig.
func parseClusterFlags(t *testing.T, args, env []string) (options, error) {
	t.Helper()
	var o options
	fs, cfgFile := newFlagSet(&o, io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, *cfgFile, env); err != nil {
		t.Fatal(err)
	}
	return o, nil
}

// TestClusterConfig: issue 13: the cluster flags, from the command line,
// WARREN_* and --config, validated into a cluster.Config; no
// --cluster-listen is a single node.
func TestClusterConfig(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := writeFile(t, "node_name = warren@c\ncluster-listen = 127.0.0.1:7003\ncluster-peers = warren@a=h1:7001, warren@b=h2:7002,warren@c=h3:7003\ncluster-secret-file = "+secretFile+"\n")

	o, _ := parseClusterFlags(t, nil, nil)
	if !strings.HasPrefix(o.Cluster.NodeName, "warren@") || strings.Contains(o.Cluster.NodeName, ".") {
		t.Fatalf("default node name %q, want warren@<short host name>", o.Cluster.NodeName)
	}
	cfg, err := clusterConfig(o.Cluster, "d", nil)
	if err != nil || cfg != nil {
		t.Fatalf("no cluster flags: got %+v, %v; want a single node (nil, nil)", cfg, err)
	}

	o, _ = parseClusterFlags(t, []string{"--config", conf, "--data-dir", "/data"}, nil)
	cfg, err = clusterConfig(o.Cluster, o.DataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node != "warren@c" || cfg.Listen != "127.0.0.1:7003" || cfg.Advertise != "h3:7003" || string(cfg.Secret) != "s3cret" ||
		cfg.DataDir != "/data" || cfg.Join || cfg.TLS != nil {
		t.Fatalf("from the config file: got %+v", cfg)
	}
	if want := map[string]string{"warren@a": "h1:7001", "warren@b": "h2:7002"}; !reflect.DeepEqual(cfg.Peers, want) {
		t.Fatalf("peers %v, want %v (self left out)", cfg.Peers, want)
	}

	o, _ = parseClusterFlags(t, []string{"--cluster-advertise", "10.0.0.3:7003"},
		[]string{"WARREN_NODE_NAME=warren@e", "WARREN_CLUSTER_LISTEN=:7000", "WARREN_CLUSTER_SECRET=x", "WARREN_CLUSTER_JOIN=true",
			"WARREN_CLUSTER_PEERS=warren@a=h1:7001"})
	cfg, err = clusterConfig(o.Cluster, "d", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node != "warren@e" || cfg.Advertise != "10.0.0.3:7003" || !cfg.Join || string(cfg.Secret) != "x" || len(cfg.Peers) != 1 {
		t.Fatalf("from the environment: got %+v", cfg)
	}
	o, _ = parseClusterFlags(t, []string{"--node-name", "warren@f", "--cluster-listen", "127.0.0.1:7000", "--cluster-secret", "x"}, nil)
	if cfg, err = clusterConfig(o.Cluster, "d", nil); err != nil || cfg.Advertise != "127.0.0.1:7000" || len(cfg.Peers) != 0 {
		t.Fatalf("advertise defaults to listen: got %+v, %v", cfg, err)
	}
}

// TestClusterConfigErrors: issue 13: malformed node names and peer lists,
// duplicates, cluster flags without --cluster-listen and clustering
// without a secret are refused with a message naming the flag.
func TestClusterConfigErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	base := []string{"--node-name", "warren@a", "--cluster-listen", "127.0.0.1:7001", "--cluster-secret", "s"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"name without @", []string{"--node-name", "warren", "--cluster-listen", ":1", "--cluster-secret", "s"}, "name@host"},
		{"name with empty host", []string{"--node-name", "warren@", "--cluster-listen", ":1", "--cluster-secret", "s"}, "name@host"},
		{"bad listen", append(base[:4:4], "--cluster-listen", "nowhere", "--cluster-secret", "s"), "--cluster-listen"},
		{"peer without =", append(base, "--cluster-peers", "warren@b"), "want name@host=host:port"},
		{"peer name without @", append(base, "--cluster-peers", "b=h:1"), "name@host"},
		{"peer address without port", append(base, "--cluster-peers", "warren@b=h"), "address"},
		{"duplicate peer", append(base, "--cluster-peers", "warren@b=h:1,warren@b=h:2"), "listed twice"},
		{"no secret", []string{"--node-name", "warren@a", "--cluster-listen", "127.0.0.1:7001"}, "needs a shared secret"},
		{"both secrets", append(base, "--cluster-secret-file", empty), "not both"},
		{"empty secret file", []string{"--cluster-listen", ":1", "--cluster-secret-file", empty}, "empty"},
		{"missing secret file", []string{"--cluster-listen", ":1", "--cluster-secret-file", empty + "-no"}, "--cluster-secret-file"},
		{"peers without listen", []string{"--cluster-peers", "warren@b=h:1"}, "--cluster-peers needs --cluster-listen"},
		{"join without listen", []string{"--cluster-join"}, "--cluster-join needs --cluster-listen"},
		{"half TLS", append(base, "--cluster-tls-cert", "c.pem"), "mutual"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := parseClusterFlags(t, tc.args, nil)
			cfg, err := clusterConfig(o.Cluster, "d", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %+v, %v; want an error mentioning %q", cfg, err, tc.want)
			}
		})
	}
}

// TestClusterNeedsSecretAtStart: issue 13: warren refuses to start a
// cluster node without a secret, before opening anything.
func TestClusterNeedsSecretAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	err := run([]string{"--cluster-listen", "127.0.0.1:0", "--node-name", "warren@x", "--data-dir", dir, "--http-addr", "off"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "needs a shared secret") {
		t.Fatalf("got %v, want the missing-secret error", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("the data directory was created (%v) although start-up was refused", serr)
	}
}

// TestClusterSecretFileMode: a secret file readable by others is used,
// with a warning.
func TestClusterSecretFileMode(t *testing.T) {
	f := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(f, []byte("abc"), 0o644)
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	cfg, err := clusterConfig(clusterOptions{NodeName: "warren@a", Listen: ":1", SecretFile: f}, "d", log)
	if err != nil || string(cfg.Secret) != "abc" {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	if !strings.Contains(logBuf.String(), "readable by others") {
		t.Fatalf("no warning for a 0644 secret file; log: %q", logBuf.String())
	}
	logBuf.Reset()
	os.Chmod(f, 0o600)
	clusterConfig(clusterOptions{NodeName: "warren@a", Listen: ":1", SecretFile: f}, "d", log)
	if logBuf.Len() != 0 {
		t.Fatalf("warning for a 0600 secret file: %q", logBuf.String())
	}
}

// TestClusterTLS: issue 13: the three TLS flags give a mutual TLS config
// that verifies peers against the CA.
func TestClusterTLS(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warren-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	os.WriteFile(filepath.Join(dir, "ca.pem"), certPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "bad.pem"), []byte("not pem"), 0o600)
	o := clusterOptions{NodeName: "warren@a", Listen: ":1", Secret: "s", TLSCert: filepath.Join(dir, "cert.pem"),
		TLSKey: filepath.Join(dir, "key.pem"), TLSCA: filepath.Join(dir, "ca.pem")}
	cfg, err := clusterConfig(o, "d", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || len(cfg.TLS.Certificates) != 1 || cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert ||
		cfg.TLS.RootCAs == nil || cfg.TLS.ClientCAs == nil {
		t.Fatalf("got TLS config %+v, want mutual TLS", cfg.TLS)
	}
	o.TLSCA = filepath.Join(dir, "bad.pem")
	if _, err := clusterConfig(o, "d", nil); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CA file without a certificate: got %v", err)
	}
}
