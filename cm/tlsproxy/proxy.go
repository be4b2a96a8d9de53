package tlsproxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
)

// TLS_CHACHA20_POLY1305_SHA256 is the TLS 1.3 suite crypto/tls may pick that the endpoint's
// record layer lacks.
const tlsChaCha20Poly1305 uint16 = 0x1303

// Proxy runs TLS 1.3 handshakes for endpoints: server handshakes with its certificate, and
// client handshakes (presenting the certificate, if it has one, to servers that ask).
type Proxy struct {
	cert    *tls.Certificate
	timeout time.Duration
	log     *slog.Logger
	active  sync.WaitGroup
}

// New returns a proxy that presents cert (nil: it runs client handshakes only, without a
// client certificate). timeout bounds each handshake (0: 10 s); log, when not nil, gets one
// line per handshake.
func New(cert *tls.Certificate, timeout time.Duration, log *slog.Logger) *Proxy {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Proxy{cert: cert, timeout: timeout, log: log}
}

// config is the crypto/tls configuration of one handshake in the role hello names.
func (p *Proxy) config(h *ktls.Hello, keys *keyLog) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13, KeyLogWriter: keys, SessionTicketsDisabled: true}
	if p.cert != nil {
		cfg.Certificates = []tls.Certificate{*p.cert}
	}
	switch h.Role {
	case ktls.RoleServer:
		if p.cert == nil {
			return nil, errors.New("tlsproxy: a server handshake needs a certificate, and this proxy has none (--cert, --key)")
		}
		cfg.GetConfigForClient = checkSuites
		return cfg, nil
	case ktls.RoleClient:
		cfg.ServerName = h.ServerName
		if h.Fingerprint != "" {
			want := strings.ToLower(h.Fingerprint)
			cfg.InsecureSkipVerify = true // the pin replaces chain and name checks
			cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
				if len(raw) == 0 {
					return errors.New("tlsproxy: the server sent no certificate")
				}
				if s := sha256.Sum256(raw[0]); hex.EncodeToString(s[:]) != want {
					return fmt.Errorf("tlsproxy: the server's certificate is sha256:%x, pinned sha256:%s (fingerprint mismatch)", s, want)
				}
				return nil
			}
		} else if len(h.RootCAs) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(h.RootCAs) {
				return nil, errors.New("tlsproxy: the endpoint's CA certificates hold no PEM certificate")
			}
			cfg.RootCAs = pool
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("tlsproxy: endpoint role %q, want %q or %q", h.Role, ktls.RoleServer, ktls.RoleClient)
}

// checkSuites refuses a ClientHello whose TLS 1.3 suite crypto/tls would choose is one the
// endpoint lacks: no AES-GCM suite offered, or ChaCha20-Poly1305 ahead of them (crypto/tls
// follows that preference).
func checkSuites(hi *tls.ClientHelloInfo) (*tls.Config, error) {
	if !slices.ContainsFunc(hi.CipherSuites, func(s uint16) bool { return ktls.KeyLen(s) > 0 }) {
		return nil, fmt.Errorf("tlsproxy: the client offers no AES-GCM suite (offered %x); the endpoint's record layer has TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384 only", hi.CipherSuites)
	}
	for _, s := range hi.CipherSuites {
		if ktls.KeyLen(s) > 0 {
			return nil, nil
		}
		if s == tlsChaCha20Poly1305 {
			return nil, fmt.Errorf("tlsproxy: the client prefers TLS_CHACHA20_POLY1305_SHA256, which the endpoint's record layer lacks (it has TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384)")
		}
	}
	return nil, nil
}

// Listen makes the proxy's unix socket at path, readable and writable by its owner only
// (mode 0600). A stale socket there (nothing listening) is replaced; anything else is left
// alone and reported.
func Listen(path string) (*net.UnixListener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("tlsproxy: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("tlsproxy: %s: another proxy is listening there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("tlsproxy: remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("tlsproxy: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("tlsproxy: %w", err)
	}
	return ln, nil
}

// Serve runs a handshake for each endpoint that connects to ln, until ctx ends or ln is
// closed; it then waits for the handshakes under way (each bounded by the timeout).
func (p *Proxy) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer p.active.Wait()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("tlsproxy: accept: %w", err)
		}
		p.active.Add(1)
		go func() {
			defer p.active.Done()
			err := p.Handle(ctx, c)
			if p.log != nil {
				if err != nil {
					p.log.Warn("tls handshake", "err", err)
				} else {
					p.log.Info("tls handshake done")
				}
			}
		}()
	}
}

// Handle runs one endpoint's handshake over c and closes c: it checks the endpoint's
// credentials, reads its Hello, runs crypto/tls in that role over the relayed records and
// sends the session parameters, or a failure with its reason.
func (p *Proxy) Handle(ctx context.Context, c *net.UnixConn) error {
	defer c.Close()
	if err := ktls.CheckPeer(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	c.SetDeadline(time.Now().Add(p.timeout))
	rc := &relayConn{uc: c}
	keys := &keyLog{}
	params, err := func() (*ktls.Params, error) {
		typ, payload, err := ktls.ReadFrame(c)
		if err != nil {
			return nil, err
		}
		var h ktls.Hello
		if typ != ktls.FrameHello || json.Unmarshal(payload, &h) != nil {
			return nil, fmt.Errorf("tlsproxy: the endpoint did not open with a hello (frame %q)", typ)
		}
		cfg, err := p.config(&h, keys)
		if err != nil {
			return nil, err
		}
		if h.Role == ktls.RoleClient {
			tc := tls.Client(rc, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				return nil, err
			}
			// The client's last records (its Finished) are under handshake keys: it sent
			// nothing under its traffic keys yet, and read nothing after the server's Finished.
			return params(tc.ConnectionState(), keys, labelServerTraffic, labelClientTraffic, 0)
		}
		tc := tls.Server(rc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		// The server read nothing after the client's Finished; what it wrote after that went
		// out under its traffic keys (nothing, with session tickets off).
		return params(tc.ConnectionState(), keys, labelClientTraffic, labelServerTraffic, rc.afterRead)
	}()
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "tls: ")
		c.SetWriteDeadline(time.Now().Add(time.Second))
		ktls.WriteFrame(c, ktls.FrameFail, []byte(msg))
		return fmt.Errorf("tlsproxy: handshake: %w", err)
	}
	if err := ktls.WriteFrame(c, ktls.FrameParams, params.Marshal()); err != nil {
		return fmt.Errorf("tlsproxy: send parameters: %w", err)
	}
	return nil
}

// params derives the endpoint's parameters: it decrypts with the peer's traffic keys (the
// secret logged as rxLabel) from sequence number 0 and encrypts with its own (txLabel),
// starting after the sent records already under them.
func params(st tls.ConnectionState, keys *keyLog, rxLabel, txLabel string, sent int) (*ktls.Params, error) {
	if st.Version != tls.VersionTLS13 {
		return nil, fmt.Errorf("tlsproxy: negotiated version 0x%04x, want TLS 1.3", st.Version)
	}
	if !slices.Contains([]uint16{ktls.TLS_AES_128_GCM_SHA256, ktls.TLS_AES_256_GCM_SHA384}, st.CipherSuite) {
		return nil, fmt.Errorf("tlsproxy: negotiated %s, which the endpoint's record layer lacks", tls.CipherSuiteName(st.CipherSuite))
	}
	rs, err := keys.secret(rxLabel)
	if err != nil {
		return nil, err
	}
	ts, err := keys.secret(txLabel)
	if err != nil {
		return nil, err
	}
	out := &ktls.Params{Version: ktls.VersionTLS13, Suite: st.CipherSuite}
	if out.Rx, err = trafficKeys(st.CipherSuite, rs, 0); err != nil {
		return nil, err
	}
	if out.Tx, err = trafficKeys(st.CipherSuite, ts, uint64(sent)); err != nil {
		return nil, err
	}
	return out, nil
}
