package mgmt_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"reflect"
	"testing"
	"time"

	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// selfSigned returns a certificate valid from notBefore to notAfter.
func selfSigned(t *testing.T, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warren"},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// The certificate-expiration check fails once the AMQPS listener's
// certificate expires within the asked time, naming the listener and the
// expiry date, and when the certificate is not valid yet.
func TestHealthCertificateExpiration(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	expires := now.Add(10 * 24 * time.Hour)
	for _, c := range []struct {
		name       string
		notBefore  time.Time
		path       string
		want       int
		expiringOn any
	}{
		{"valid for the week", now.Add(-time.Hour), "1/weeks", 200, nil},
		{"expires within the month", now.Add(-time.Hour), "1/months", 503,
			// RabbitMQ's format: the hour is not zero-padded.
			[]any{fmt.Sprintf("%d-%02d-%02d %d:%02d:%02d", expires.Year(), expires.Month(), expires.Day(), expires.Hour(), expires.Minute(), expires.Second())}},
		{"not valid yet", now.Add(time.Hour), "1/days", 503, []any{map[string]any{"error": "Certificate is not yet valid"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cert := selfSigned(t, c.notBefore, expires)
			w := warrentest.Start(t, warrentest.WithConfig(func(cfg *server.Config) {
				cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
				cfg.AMQPSAddr = "127.0.0.1:0"
				cfg.TLSCertFile = "/etc/warren/cert.pem"
			}))
			f := &fixture{t: t, w: w, api: w.MgmtURL()}
			var body map[string]any
			if st := f.call("GET", "/api/health/checks/certificate-expiration/"+c.path, nil, &body); st != c.want {
				t.Fatalf("status %d, want %d: %v", st, c.want, body)
			}
			if c.want == 200 {
				if body["status"] != "ok" {
					t.Fatalf("body %v", body)
				}
				return
			}
			exp, _ := body["expired"].([]any)
			if body["status"] != "failed" || body["reason"] != "Certificates expiring" || len(exp) != 1 {
				t.Fatalf("body %v", body)
			}
			l := exp[0].(map[string]any)
			if l["protocol"] != "amqp/ssl" || l["certfile"] != "/etc/warren/cert.pem" || l["port"] == float64(0) ||
				!reflect.DeepEqual(l["certfile_expires_on"], c.expiringOn) {
				t.Fatalf("expired listener %v, want certfile_expires_on %v", l, c.expiringOn)
			}
		})
	}
}
