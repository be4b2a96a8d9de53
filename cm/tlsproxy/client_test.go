package tlsproxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
)

// tlsServer runs a stock crypto/tls server (session tickets on: it sends NewSessionTicket
// after the handshake) on the lab's certificate for one connection.
func (l *lab) tlsServer(t *testing.T) (addr string, conns <-chan *tls.Conn, errs <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cc, ec := make(chan *tls.Conn, 1), make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			ec <- err
			return
		}
		tc := tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{l.cert}, MinVersion: tls.VersionTLS13})
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		if err := tc.Handshake(); err != nil {
			nc.Close()
			ec <- err
			return
		}
		cc <- tc
	}()
	return ln.Addr().String(), cc, ec
}

func (l *lab) fingerprint() string {
	s := sha256.Sum256(l.cert.Certificate[0])
	return hex.EncodeToString(s[:])
}

// The client role: the endpoint dials a stock TLS 1.3 server, the proxy verifies it (pinned,
// or by CA), and 1 MiB goes each way; the server's session tickets are skipped.
func TestClientEndpointExchangesMiB(t *testing.T) {
	l := newLab(t)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: l.cert.Certificate[0]})
	for name, cfg := range map[string]ktls.Config{
		"pinned": {Fingerprint: l.fingerprint()},
		"ca":     {ServerName: "xdproce", RootCAs: ca},
	} {
		t.Run(name, func(t *testing.T) {
			addr, conns, errs := l.tlsServer(t)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Proxy, cfg.Kernel = l.sock, ktls.KernelOff
			c, err := ktls.Client(context.Background(), nc, &cfg)
			if err != nil {
				t.Fatalf("client endpoint: %v", err)
			}
			defer c.Close()
			var srv *tls.Conn
			select {
			case srv = <-conns:
			case err := <-errs:
				t.Fatalf("server: %v", err)
			}
			defer srv.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			exchange(t, c, srv, mib)
		})
	}
}

func TestClientEndpointWrongPin(t *testing.T) {
	l := newLab(t)
	addr, _, errs := l.tlsServer(t)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ktls.Client(context.Background(), nc, &ktls.Config{Proxy: l.sock, Fingerprint: strings.Repeat("0", 64), Kernel: ktls.KernelOff})
	if err == nil || !strings.Contains(err.Error(), "fingerprint mismatch") {
		t.Fatalf("wrong pin: %v", err)
	}
	if err := <-errs; err == nil {
		t.Fatal("the server completed a handshake the client refused")
	}
}
