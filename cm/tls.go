package cm

import (
	"bufio"
	"context"
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
	"path/filepath"
	"strings"
	"time"
)

// TLSConfig configures TLS on a control connection.
//
// Server: CertFile and KeyFile (PEM) name its certificate and key; without them the server
// uses a self-signed ECDSA P-256 certificate and clients pin its fingerprint
// (Listener.Fingerprint, printed by `xdproce serve --tls`). With Dir set, that certificate is
// kept there (tls-cert.pem, tls-key.pem; made on first use) so its fingerprint stays the same
// across restarts; without Dir a new one is made at each Listen. ClientCAFile (PEM) makes the
// server require a client certificate signed by one of its CAs (mutual TLS).
//
// Client: Fingerprint pins the server certificate by its SHA-256 (64 hex digits, colons and
// case ignored); otherwise CAFile (PEM) or the system roots verify it against ServerName (or
// the host part of the address). A client with neither a fingerprint nor a CA cannot check a
// self-signed server, and says so. CertFile and KeyFile are the client's certificate, for
// servers with a ClientCAFile.
type TLSConfig struct {
	CertFile, KeyFile string
	CAFile            string
	Fingerprint       string
	ServerName        string
	ClientCAFile      string
	Dir               string
}

// Names of the files TLSConfig.Dir keeps the self-signed certificate in.
const (
	DirCertFile = "tls-cert.pem"
	DirKeyFile  = "tls-key.pem"
)

// Fingerprint returns the SHA-256 of a DER certificate as 64 lower-case hex digits.
func Fingerprint(der []byte) string {
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
}

// ParseFingerprint checks a SHA-256 fingerprint as users write it (64 hex digits, colons,
// spaces, case and a "sha256:" prefix ignored) and returns its 64 lower-case hex digits.
func ParseFingerprint(s string) (string, error) { return normFingerprint(s) }

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
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cm: tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, errors.New("cm: tls: a client certificate needs both --tls-cert and --tls-key")
	}
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

// server returns the server's TLS configuration and certificate fingerprint; generated is
// true when it made a new self-signed certificate.
func (t *TLSConfig) server() (cfg *tls.Config, fp string, generated bool, err error) {
	var cert tls.Certificate
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err = tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, "", false, fmt.Errorf("cm: tls certificate: %w", err)
		}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, "", false, errors.New("cm: tls: a certificate needs both --tls-cert and --tls-key")
	case t.Dir != "":
		if cert, generated, err = dirCertificate(t.Dir); err != nil {
			return nil, "", false, err
		}
	default:
		if cert, err = SelfSigned("xdproce"); err != nil {
			return nil, "", false, err
		}
		generated = true
	}
	cfg = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, "", false, fmt.Errorf("cm: tls client ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", false, fmt.Errorf("cm: tls client ca %s: no PEM certificate in it", t.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, Fingerprint(cert.Certificate[0]), generated, nil
}

// dirCertificate loads the self-signed certificate kept in dir, making it (and dir, mode
// 0700) when there is none yet.
func dirCertificate(dir string) (cert tls.Certificate, generated bool, err error) {
	cf, kf := filepath.Join(dir, DirCertFile), filepath.Join(dir, DirKeyFile)
	_, cerr := os.Stat(cf)
	_, kerr := os.Stat(kf)
	if errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return cert, false, fmt.Errorf("cm: tls: %w", err)
		}
		if _, err := WriteSelfSigned("xdproce", cf, kf); err != nil {
			return cert, false, err
		}
		generated = true
	}
	cert, err = tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		return cert, false, fmt.Errorf("cm: tls certificate kept in %s: %w", dir, err)
	}
	return cert, generated, nil
}

// peekedConn is a connection whose first bytes were read ahead into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// peekTLS looks at the first byte a client sent: a TLS handshake record starts with 22. plain
// is true for anything else (a plain client's frame length starts with 0).
func (l *Listener) peekTLS(ctx context.Context, nc net.Conn) (net.Conn, bool) {
	pc := &peekedConn{Conn: nc, r: bufio.NewReader(nc)}
	nc.SetReadDeadline(time.Now().Add(l.timeout))
	stop := context.AfterFunc(ctx, func() { nc.SetReadDeadline(time.Unix(1, 0)) })
	b, err := pc.r.Peek(1)
	stop()
	nc.SetReadDeadline(time.Time{})
	return pc, err == nil && b[0] != 22
}

// refusePlain answers a plain-TCP client of a TLS server with one error frame that says what
// to do (or, to a perftest or pingpong client, what this is), and closes the connection.
func (l *Listener) refusePlain(ctx context.Context, nc net.Conn) error {
	defer nc.Close()
	c := newConn(nc, l.timeout)
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	_, err := c.recv(ctx)
	switch {
	case err == nil:
		msg := "server requires TLS (--tls with --tls-fingerprint or --tls-ca)"
		if l.fingerprint != "" {
			msg = fmt.Sprintf("server requires TLS (--tls-fingerprint %s)", l.fingerprint)
		}
		c.sendMsg(ctx, &Message{Type: TypeError, Error: msg})
	case errors.Is(err, ErrProtocol):
		return fmt.Errorf("cm: client %v: %w", nc.RemoteAddr(), c.refuseForeign(ctx, fmt.Errorf("hello: %w", err)))
	}
	return fmt.Errorf("cm: client %v: %w: it spoke plain TCP (refused)", nc.RemoteAddr(), ErrTLSRequired)
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
