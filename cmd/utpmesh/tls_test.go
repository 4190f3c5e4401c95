package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/mesh"
)

// writeCA generates a CA and a server certificate for 127.0.0.1 signed by
// it, and writes ca.pem, server.pem and server-key.pem to dir.
func writeCA(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "utpmesh test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// TestTLS: a mesh with --tls-cert/--tls-key requires TLS on its client
// port. A worker and the CLI that trust the CA (--tls-ca) connect; without
// it the certificate is refused; one half of the pair is a usage error.
func TestTLS(t *testing.T) {
	ca, cert, key := writeCA(t, t.TempDir())
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog,
		TLSCert: cert, TLSKey: key, Identities: &mesh.IdentityConfig{}, Auth: &mesh.AuthConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	url := m.ClientURL()

	if code, stderr := runProc(t, "worker", "--nats", url, "--creds", m.CredsFile("admin"), "echo"); code != 1 || !strings.Contains(stderr, "certificate") {
		t.Fatalf("worker without --tls-ca: exit %d, stderr:\n%s", code, stderr)
	}
	w := startProc(t, "worker", "--nats", url, "--tls-ca", ca, "--creds", m.CredsFile("admin"), "echo")
	w.waitLine(t, "worker serving")
	if out, code := runCLI(m, "policy", "config", "--project", "demo", "--tls-ca", ca, "--creds", m.CredsFile("admin")); code != 0 {
		t.Fatalf("CLI with --tls-ca: exit %d\n%s", code, out)
	}
	if _, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog, TLSCert: cert}); err == nil ||
		!strings.Contains(err.Error(), "TLS needs both a certificate and its key") {
		t.Fatalf("TLS cert without key: %v", err)
	}
}
