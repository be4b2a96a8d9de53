package cm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"time"
)

// TLSConfig configures TLS on a control connection.
//
// Server: CertFile and KeyFile (PEM) name its certificate and key; without them the server
// generates a self-signed ECDSA P-256 certificate at start and clients pin its fingerprint
// (Listener.Fingerprint, printed by `xdproce serve --tls`).
//
// Client: Fingerprint pins the server certificate by its SHA-256 (64 hex digits, colons and
// case ignored); otherwise CAFile (PEM) or the system roots verify it against ServerName (or
// the host part of the address). A client with neither a fingerprint nor a CA cannot check a
// self-signed server, and says so.
type TLSConfig struct {
	CertFile, KeyFile string
	CAFile            string
	Fingerprint       string
	ServerName        string
}

// Fingerprint returns the SHA-256 of a DER certificate as 64 lower-case hex digits.
func Fingerprint(der []byte) string {
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
}

func normFingerprint(s string) (string, error) {
	f := strings.ToLower(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimPrefix(strings.TrimPrefix(s, "sha256:"), "SHA256:")))
	if len(f) != 64 {
		return "", fmt.Errorf("cm: tls fingerprint %q: want the 64 hex digits of a SHA-256", s)
	}
	if _, err := hex.DecodeString(f); err != nil {
		return "", fmt.Errorf("cm: tls fingerprint %q: not hex", s)
	}
	return f, nil
}

func (t *TLSConfig) client(addr string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: t.ServerName}
	if cfg.ServerName == "" {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = h
		}
	}
	if t.Fingerprint != "" {
		want, err := normFingerprint(t.Fingerprint)
		if err != nil {
			return nil, err
		}
		// The pin replaces chain and name checks: the certificate is the identity.
		cfg.InsecureSkipVerify = true
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return fmt.Errorf("%w: the server sent no certificate", ErrFingerprintMismatch)
			}
			if got := Fingerprint(raw[0]); got != want {
				return fmt.Errorf("%w: the server's certificate is sha256:%s, pinned sha256:%s", ErrFingerprintMismatch, got, want)
			}
			return nil
		}
		return cfg, nil
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cm: tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cm: tls ca %s: no PEM certificate in it", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func (t *TLSConfig) server() (*tls.Config, string, error) {
	var cert tls.Certificate
	var err error
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err = tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("cm: tls certificate: %w", err)
		}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, "", errors.New("cm: tls: a certificate needs both --tls-cert and --tls-key")
	default:
		cert, err = SelfSigned("xdproce")
		if err != nil {
			return nil, "", err
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}, Fingerprint(cert.Certificate[0]), nil
}

// SelfSigned generates a self-signed ECDSA P-256 certificate for name, valid for a year.
func SelfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cm: tls: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cm: tls: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cm: tls: create certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// WriteSelfSigned generates a self-signed certificate and writes it and its key as PEM files
// (the key readable by the owner only), returning the certificate's fingerprint.
func WriteSelfSigned(name, certFile, keyFile string) (string, error) {
	cert, err := SelfSigned(name)
	if err != nil {
		return "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return "", fmt.Errorf("cm: tls: encode key: %w", err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		return "", fmt.Errorf("cm: tls: %w", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", fmt.Errorf("cm: tls: %w", err)
	}
	return Fingerprint(cert.Certificate[0]), nil
}
