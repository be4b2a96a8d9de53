package cm

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/tlsproxy"
)

// startProxy runs a TLS proxy with a new self-signed certificate and returns its socket and
// the certificate's fingerprint.
func startProxy(t *testing.T) (sock, fp string) {
	t.Helper()
	cert, err := SelfSigned("xdproce")
	if err != nil {
		t.Fatal(err)
	}
	sock = filepath.Join(t.TempDir(), "tls.sock")
	ln, err := tlsproxy.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tlsproxy.New(&cert, 5*time.Second, nil).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return sock, Fingerprint(cert.Certificate[0])
}

// The control connection with its TLS handshake in a proxy: a stock crypto/tls client pins
// the proxy's certificate, and PSK authentication runs inside the session.
func TestControlTLSProxy(t *testing.T) {
	sock, fp := startProxy(t)
	psk := []byte(strings.Repeat("k", MinPSK))
	l, err := Listen("127.0.0.1:0", &Config{TLSProxy: sock, PSK: psk})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	serveEcho(t, l)
	if l.Fingerprint() != "" {
		t.Errorf("fingerprint %q: the proxy holds the certificate", l.Fingerprint())
	}
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, PSK: psk, TLS: &TLSConfig{Fingerprint: fp}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), &Message{Op: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()

	wrong := []byte(strings.Repeat("w", MinPSK))
	if _, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, PSK: wrong, TLS: &TLSConfig{Fingerprint: fp}}); !errors.Is(err, ErrAuth) {
		t.Errorf("wrong key through the proxy: %v, want ErrAuth", err)
	}
	if _, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, PSK: psk, TLS: &TLSConfig{Fingerprint: strings.Repeat("0", 64)}}); !errors.Is(err, ErrFingerprintMismatch) {
		t.Errorf("wrong pin: %v", err)
	}
	_, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, PSK: psk, Timeout: 2 * time.Second})
	if !errors.Is(err, ErrTLSRequired) || !strings.Contains(err.Error(), "server requires TLS") {
		t.Errorf("plain client: %v", err)
	}

	// --insecure: TLS without client authentication.
	li, err := Listen("127.0.0.1:0", &Config{TLSProxy: sock, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	serveEcho(t, li)
	c, err = Dial(context.Background(), li.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{Fingerprint: fp}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), &Message{Op: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// The client side through a proxy too: against a crypto/tls server (which sends session
// tickets the endpoint skips) and against a proxied server, with PSK inside.
func TestDialTLSProxy(t *testing.T) {
	sock, fp := startProxy(t)
	psk := []byte(strings.Repeat("k", MinPSK))
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	tfp, err := WriteSelfSigned("xdproce", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	plainTLS, err := Listen("127.0.0.1:0", &Config{PSK: psk, TLS: &TLSConfig{CertFile: cert, KeyFile: key}})
	if err != nil {
		t.Fatal(err)
	}
	defer plainTLS.Close()
	serveEcho(t, plainTLS)
	proxied, err := Listen("127.0.0.1:0", &Config{PSK: psk, TLSProxy: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	serveEcho(t, proxied)
	for name, tc := range map[string]struct {
		addr string
		tls  *TLSConfig
	}{
		"crypto-tls-server/pinned": {plainTLS.Addr().String(), &TLSConfig{Fingerprint: tfp}},
		"crypto-tls-server/ca":     {plainTLS.Addr().String(), &TLSConfig{CAFile: cert, ServerName: "xdproce"}},
		"proxied-server":           {proxied.Addr().String(), &TLSConfig{Fingerprint: fp}},
	} {
		c, err := Dial(context.Background(), tc.addr, &Config{Retry: -1, PSK: psk, TLSProxy: sock, TLS: tc.tls})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for range 3 {
			if _, err := c.Call(context.Background(), &Message{Op: "x"}, nil); err != nil {
				t.Errorf("%s: call: %v", name, err)
			}
		}
		c.Close()
	}
	_, err = Dial(context.Background(), proxied.Addr().String(), &Config{Retry: -1, PSK: psk, TLSProxy: sock, TLS: &TLSConfig{Fingerprint: tfp}})
	if err == nil || !strings.Contains(err.Error(), "fingerprint mismatch") {
		t.Errorf("wrong pin through the client's proxy: %v", err)
	}
}

func TestListenTLSProxyRefuses(t *testing.T) {
	sock, _ := startProxy(t)
	if _, err := Listen("127.0.0.1:0", &Config{TLSProxy: sock}); !errors.Is(err, ErrNoAuth) {
		t.Errorf("no authentication: %v", err)
	}
	if _, err := Listen("127.0.0.1:0", &Config{TLSProxy: sock, Insecure: true, TLS: &TLSConfig{}}); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("TLS and a proxy: %v", err)
	}
	if _, err := Listen("127.0.0.1:0", &Config{TLSProxy: filepath.Join(t.TempDir(), "none"), Insecure: true}); err == nil {
		t.Error("a missing proxy socket was accepted")
	}
}
