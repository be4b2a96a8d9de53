package cm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
)

// Config configures both ends of the control protocol. The zero value (or nil) means plain TCP
// on DefaultPort, 5 s of retries for a client, 10 s for the hello.
type Config struct {
	// Port used when an address has none; 0 means DefaultPort.
	Port int
	// Retry is how long a client keeps trying to connect (the server may still be starting);
	// 0 means 5 s, negative means one attempt.
	Retry time.Duration
	// Backoff is the first pause between attempts (0: 50 ms); it doubles up to 1 s.
	Backoff time.Duration
	// Timeout bounds each connection attempt and the hello exchange (0: 10 s).
	Timeout time.Duration
	// TLS, when set, runs the control connection over TLS.
	TLS *TLSConfig
	// TLSProxy, when set, is the unix socket of a TLS proxy (cm/tlsproxy, `xdproce
	// tls-proxy`): the TLS handshake runs there and the connection's data moves through
	// cm/ktls, in kernel TLS where the kernel has it. A server's proxy holds its certificate
	// (TLS must be nil) and checks no client certificates: clients authenticate with PSK, or
	// Insecure. A client's proxy verifies the server as TLS says (Fingerprint, CAFile,
	// ServerName; TLS may be nil: system roots) and presents its own certificate, if it has
	// one, as the client certificate (TLS.CertFile must be empty).
	TLSProxy string
	// PSK, when set, authenticates both ends with this pre-shared key (auth.go; at least
	// MinPSK bytes, LoadPSK reads one from a file). A client with a key refuses a server
	// without one, and the other way round.
	PSK []byte
	// Insecure lets Listen accept clients it cannot authenticate (no PSK and no
	// TLS.ClientCAFile); without it such a Listen fails with ErrNoAuth.
	Insecure bool
	// Require lists capabilities the peer must announce in its hello (Capabilities); one it
	// lacks fails the hello with ErrCapability on both sides.
	Require []string
	// DialContext, when set, makes a client's TCP connections instead of a net.Dialer (a
	// test's wrapper that counts the control connection's bytes, for one).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (c *Config) orDefault() Config {
	var v Config
	if c != nil {
		v = *c
	}
	if v.Port == 0 {
		v.Port = DefaultPort
	}
	if v.Retry == 0 {
		v.Retry = 5 * time.Second
	}
	if v.Backoff == 0 {
		v.Backoff = 50 * time.Millisecond
	}
	if v.Timeout == 0 {
		v.Timeout = 10 * time.Second
	}
	return v
}

// withPort adds the default port to an address without one ("198.51.100.2", "fe80::1%veth0",
// "[2001:db8::1]", "host") and leaves "host:port" alone.
func withPort(addr string, port int) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if len(addr) > 1 && addr[0] == '[' && addr[len(addr)-1] == ']' {
		addr = addr[1 : len(addr)-1]
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

// Dial connects to an xdproce control endpoint at addr (host or host:port), retrying refused
// and unreachable connections with backoff for cfg.Retry, then runs TLS (when configured) and
// the hello exchange. Errors name the address and how long it tried; the cause (for example
// syscall.ECONNREFUSED, syscall.EHOSTUNREACH) stays reachable with errors.Is, and so do
// ErrVersionMismatch and ErrFingerprintMismatch.
func Dial(ctx context.Context, addr string, cfg *Config) (*Conn, error) {
	c := cfg.orDefault()
	addr = withPort(addr, c.Port)
	var tcfg *tls.Config
	var pcfg *ktls.Config
	var err error
	switch {
	case c.TLSProxy != "":
		if pcfg, err = proxyClient(&c, addr); err != nil {
			return nil, err
		}
	case c.TLS != nil:
		if tcfg, err = c.TLS.client(addr); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	deadline := start.Add(c.Retry)
	pause := c.Backoff
	dial := c.DialContext
	if dial == nil {
		dial = new(net.Dialer).DialContext
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.Timeout)
		nc, err := dial(actx, "tcp", addr)
		cancel()
		if err == nil {
			conn, herr := handshakeClient(ctx, nc, tcfg, pcfg, &c, addr)
			if herr == nil {
				return conn, nil
			}
			nc.Close()
			// A server that accepted but is not ready to talk yet is not worth a retry when
			// it answered with something definite.
			if !retryableHello(herr) || c.Retry < 0 || !time.Now().Before(deadline) {
				return nil, herr
			}
			err = herr
		} else if ctx.Err() != nil {
			return nil, fmt.Errorf("cm: connect to %s: %w", addr, ctx.Err())
		} else if !retryableDial(err) || c.Retry < 0 || !time.Now().Before(deadline) {
			return nil, fmt.Errorf("cm: connect to %s (%d %s in %v): %w", addr, attempt, plural(attempt, "attempt"), time.Since(start).Round(time.Millisecond), err)
		}
		wait := pause
		if left := time.Until(deadline); left < wait {
			wait = left
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("cm: connect to %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
		if pause *= 2; pause > time.Second {
			pause = time.Second
		}
	}
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// retryableDial: errors a server that is still starting (or a neighbour entry still being
// resolved) gives; a name that does not resolve is final.
func retryableDial(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Temporary()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, context.DeadlineExceeded)
}

// retryableHello: the connection broke during TLS or the hello (a server accepting before it
// is ready); version and fingerprint mismatches and remote errors are final.
func retryableHello(err error) bool {
	if errors.Is(err, ErrVersionMismatch) || errors.Is(err, ErrFingerprintMismatch) || errors.Is(err, ErrRemote) ||
		errors.Is(err, ErrAuth) || errors.Is(err, ErrCapability) || errors.Is(err, ErrTLSRequired) {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func handshakeClient(ctx context.Context, nc net.Conn, tcfg *tls.Config, pcfg *ktls.Config, cfg *Config, addr string) (*Conn, error) {
	if pcfg != nil {
		kc, err := ktls.Client(ctx, nc, pcfg)
		if err != nil {
			return nil, fmt.Errorf("cm: %w (is the server running with TLS?)", err)
		}
		nc = kc
	}
	if tcfg != nil {
		tc := tls.Client(nc, tcfg)
		hctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			if errors.Is(err, ErrFingerprintMismatch) {
				return nil, fmt.Errorf("cm: tls with %s: %w", addr, err)
			}
			var ve *tls.CertificateVerificationError
			if errors.As(err, &ve) {
				return nil, fmt.Errorf("cm: tls with %s: %w (a self-signed server: pin its fingerprint, or give its certificate as the CA)", addr, err)
			}
			return nil, fmt.Errorf("cm: tls with %s: %w (is the server running with --tls?)", addr, err)
		}
		nc = tc
	}
	conn := newConn(nc, cfg.Timeout)
	if err := conn.clientHello(ctx, cfg); err != nil {
		return nil, fmt.Errorf("cm: %s: %w", addr, err)
	}
	return conn, nil
}

// proxyClient is the endpoint configuration of a client whose TLS handshake runs in a proxy.
func proxyClient(c *Config, addr string) (*ktls.Config, error) {
	p := &ktls.Config{Proxy: c.TLSProxy, Timeout: c.Timeout}
	t := c.TLS
	if t == nil {
		t = &TLSConfig{}
	}
	if t.CertFile != "" || t.KeyFile != "" {
		return nil, errors.New("cm: tls proxy: the client certificate is the proxy's own (tls-proxy --cert, --key), not one given here")
	}
	p.ServerName = t.ServerName
	if p.ServerName == "" {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			p.ServerName = h
		}
	}
	if t.Fingerprint != "" {
		fp, err := normFingerprint(t.Fingerprint)
		if err != nil {
			return nil, err
		}
		p.Fingerprint = fp
	} else if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cm: tls ca: %w", err)
		}
		p.RootCAs = pem
	}
	return p, nil
}

// Listener accepts control connections.
type Listener struct {
	ln          net.Listener
	tcfg        *tls.Config
	proxy       *ktls.Config // TLS with the handshake in a proxy (Config.TLSProxy)
	fingerprint string
	generated   bool
	timeout     time.Duration
	psk         []byte
	require     []string
	acc         acceptor // accept.go
}

// Listen listens on addr (":18515" when empty; a bare host gets cfg's port). It needs a way
// to authenticate clients (cfg.PSK or cfg.TLS.ClientCAFile) or cfg.Insecure, else it fails
// with ErrNoAuth. With cfg.TLS and no certificate files it uses a self-signed certificate (kept
// in TLS.Dir when set); Fingerprint gives the SHA-256 clients pin.
func Listen(addr string, cfg *Config) (*Listener, error) {
	c := cfg.orDefault()
	if addr == "" {
		addr = ":" + strconv.Itoa(c.Port)
	} else {
		addr = withPort(addr, c.Port)
	}
	if c.PSK != nil && len(c.PSK) < MinPSK {
		return nil, fmt.Errorf("cm: listen: pre-shared key of %d bytes, want at least %d", len(c.PSK), MinPSK)
	}
	if c.PSK == nil && (c.TLS == nil || c.TLS.ClientCAFile == "") && !c.Insecure {
		return nil, fmt.Errorf("cm: listen on %s: %w (set a pre-shared key or a TLS client CA, or Insecure)", addr, ErrNoAuth)
	}
	l := &Listener{timeout: c.Timeout, psk: c.PSK, require: c.Require}
	if c.TLSProxy != "" {
		if c.TLS != nil {
			return nil, errors.New("cm: listen: TLS and a TLS proxy are two ways to run TLS; choose one")
		}
		st, err := os.Stat(c.TLSProxy)
		if err != nil {
			return nil, fmt.Errorf("cm: tls proxy: %w", err)
		}
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("cm: tls proxy %s: not a unix socket", c.TLSProxy)
		}
		l.proxy = &ktls.Config{Proxy: c.TLSProxy, Timeout: c.Timeout}
	}
	if c.TLS != nil {
		var err error
		if l.tcfg, l.fingerprint, l.generated, err = c.TLS.server(); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cm: listen on %s: %w", addr, err)
	}
	l.ln = ln
	return l, nil
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Fingerprint is the SHA-256 of the server's TLS certificate as 64 hex digits ("" without TLS).
func (l *Listener) Fingerprint() string { return l.fingerprint }

// Generated reports whether Listen made a new self-signed certificate (none was given, and
// TLS.Dir held none yet).
func (l *Listener) Generated() bool { return l.generated }
