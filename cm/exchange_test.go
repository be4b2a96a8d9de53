package cm

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// dialPair returns both ends of a control connection on loopback.
func dialPair(t *testing.T) (client, server *Conn) {
	t.Helper()
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	acc := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(context.Background())
		if err != nil {
			t.Error(err)
		}
		acc <- c
	}()
	client, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: -1})
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestExchangeRC: both ends get the other's endpoint; a zero GID becomes the
// connection's local address as a GID.
func TestExchangeRC(t *testing.T) {
	c, s := dialPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srvEnd := RCEndpoint{QPN: 0x11, PSN: 0xABCDEF, GID: netip.MustParseAddr("::ffff:198.51.100.1"),
		Region: Region{Addr: 0x7f0000001000, RKey: 0x1234, Len: 4096}}
	cliEnd := RCEndpoint{QPN: 0x12, PSN: 7}
	got := make(chan RCEndpoint, 1)
	go func() {
		peer, err := ExchangeRC(ctx, s, srvEnd)
		if err != nil {
			t.Error(err)
		}
		got <- peer
	}()
	peer, err := ExchangeRC(ctx, c, cliEnd)
	if err != nil {
		t.Fatal(err)
	}
	if peer != srvEnd {
		t.Errorf("client got %+v, want %+v", peer, srvEnd)
	}
	want := cliEnd
	want.GID = netip.MustParseAddr("::ffff:127.0.0.1")
	if p := <-got; p != want {
		t.Errorf("server got %+v, want %+v", p, want)
	}
}

// TestExchangeRCRefuses: values no queue pair can have are refused on either
// side, and a peer that sends another message is a protocol error.
func TestExchangeRCRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gid := netip.MustParseAddr("::ffff:198.51.100.1")
	for _, e := range []RCEndpoint{
		{QPN: 1, GID: gid},
		{QPN: 1 << 24, GID: gid},
		{QPN: 5, PSN: 1 << 24, GID: gid},
		{QPN: 5, GID: gid, Region: Region{Addr: 1, RKey: 2}},
		{QPN: 5, GID: gid, Region: Region{Addr: ^uint64(0), RKey: 2, Len: 2}},
	} {
		c, s := dialPair(t)
		if _, err := ExchangeRC(ctx, c, e); err == nil || !strings.Contains(err.Error(), "ours") {
			t.Errorf("sending %+v: %v, want a refusal", e, err)
		}
		// The same values from a peer (sent raw) are a protocol error.
		go s.SendValue(ctx, rcEndpointMsg{Type: typeRCEndpoint, RCEndpoint: e})
		if _, err := ExchangeRC(ctx, c, RCEndpoint{QPN: 9, GID: gid}); !errors.Is(err, ErrProtocol) {
			t.Errorf("receiving %+v: %v, want ErrProtocol", e, err)
		}
	}
	c, s := dialPair(t)
	go s.Send(ctx, &Message{Type: TypeRequest, Op: "send"})
	if _, err := ExchangeRC(ctx, c, RCEndpoint{QPN: 9, GID: gid}); !errors.Is(err, ErrProtocol) {
		t.Errorf("after a request message: %v, want ErrProtocol", err)
	}
}
