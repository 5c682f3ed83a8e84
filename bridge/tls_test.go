package bridge_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// TestShovelOverAMQPS: issue 24. A shovel reaches a broker over amqps://
// with RabbitMQ's TLS query keys: cacertfile (the peer is verified by
// default), server_name_indication, verify=verify_none. One that does not
// trust the peer's certificate does not connect, and says why.
func TestShovelOverAMQPS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	src := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
		c.AMQPSAddr = "127.0.0.1:0"
	}))
	dest := warrentest.Start(t)
	_, port, _ := net.SplitHostPort(src.Server().TLSAddr().String())
	sch, dch := channel(t, src.URL()), channel(t, dest.URL())
	publish(t, sch, "tls-src", "m", 5)
	if _, err := dch.QueueDeclare("tls-dest", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	put := func(name, query string) {
		t.Helper()
		uri := "amqps://guest:guest@localhost:" + port + "/%2F?" + query
		if st, body := api(t, "PUT", dest.MgmtURL(), "/api/parameters/shovel/%2F/"+name, map[string]any{"value": map[string]any{
			"src-uri": uri, "src-queue": "tls-src", "dest-uri": "amqp://", "dest-queue": "tls-dest", "reconnect-delay": 1}}); st != 201 {
			t.Fatalf("PUT %s: %d %s", name, st, body)
		}
	}
	// Not trusted: no connection, the reason shown.
	put("untrusted", "heartbeat=5")
	testutil.Eventually(t, 10*time.Second, "the untrusted shovel refused by TLS", func() bool {
		_, body := api(t, "GET", dest.MgmtURL(), "/api/shovels/%2F", nil)
		return strings.Contains(string(body), `"state":"terminated"`) && strings.Contains(string(body), "certificate")
	})
	api(t, "DELETE", dest.MgmtURL(), "/api/parameters/shovel/%2F/untrusted", nil)
	// Trusted through cacertfile, the name checked against SNI.
	put("trusted", "cacertfile="+url.QueryEscape(ca)+"&server_name_indication=localhost")
	checkInOrder(t, drain(t, dch, "tls-dest", 5, 10*time.Second), "m", 5)
	_, body := api(t, "GET", dest.MgmtURL(), "/api/shovels/%2F", nil)
	if !strings.Contains(string(body), `"src_uri":"amqps://localhost:`+port+`/%2F"`) {
		t.Fatalf("status: %s", body)
	}
	api(t, "DELETE", dest.MgmtURL(), "/api/parameters/shovel/%2F/trusted", nil)
	// verify_none: connects without checking.
	publish(t, sch, "tls-src", "n", 3)
	put("unverified", "verify=verify_none")
	checkInOrder(t, drain(t, dch, "tls-dest", 3, 10*time.Second), "n", 3)
}
