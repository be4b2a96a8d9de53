package cm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestControlServerTellsStockClients: a perftest or pingpong client (bench's, pingpong's) that
// reaches a control listener, plain, with a pre-shared key or with TLS, stops with
// ErrControlPeer at its first read instead of a protocol error or a wait, and the listener's
// Accept names the exchange that reached it.
func TestControlServerTellsStockClients(t *testing.T) {
	for name, cfg := range map[string]*Config{
		"insecure": {Insecure: true},
		"psk":      {PSK: []byte("correct horse battery staple 42")},
		"tls":      {Insecure: true, TLS: &TLSConfig{}},
	} {
		for _, kind := range []string{"perftest", "pingpong"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				l, err := Listen("127.0.0.1:0", cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				accepted := make(chan error, 1)
				go func() { _, err := l.Accept(ctx); accepted <- err }()
				nc, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				want := "perftest's exchange"
				if kind == "perftest" {
					_, err = NewPerftestConn(nc, true).ExchangeVersions(ctx, "")
				} else {
					want = "ibv_*_pingpong's exchange"
					_, err = DialPingpong(ctx, nc, PingpongDest{QPN: 0x11, PSN: 0x1234, GID: GIDFromAddr(netip.MustParseAddr("127.0.0.1"))})
				}
				if !errors.Is(err, ErrControlPeer) || strings.Contains(err.Error(), "\n") {
					t.Errorf("client: %v, want ErrControlPeer", err)
				}
				if err := <-accepted; !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), want) {
					t.Errorf("Accept: %v, want ErrProtocol naming %q", err, want)
				}
			})
		}
	}
}
