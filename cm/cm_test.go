package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
)

func TestPingpongDestErrors(t *testing.T) {
	good := "0000:000011:c829ba:00000000000000000000ffffc000020c\x00"
	if _, err := UnmarshalPingpongDest([]byte(good)); err != nil {
		t.Fatalf("good message: %v", err)
	}
	for _, bad := range []string{
		"",
		"0000:000011:c829ba",
		"0000:00001:c829ba:00000000000000000000ffffc000020c",   // short QPN
		"0000:000011:c829bz:00000000000000000000ffffc000020c",  // not hex
		"0000:000011:c829ba:00000000000000000000ffffc000020",   // 31 digits
		"0000:000011:c829ba:00000000000000000000ffffc000020c:", // extra field
		"00000:00011:c829ba:00000000000000000000ffffc000020c",
	} {
		_, err := UnmarshalPingpongDest([]byte(bad))
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: err %v, want ErrProtocol", bad, err)
		}
	}
	if _, err := (PingpongDest{QPN: 1 << 24}).Marshal(); err == nil {
		t.Error("QPN over 24 bits marshalled")
	}
}

func TestPerftestDestRoundTrip(t *testing.T) {
	for _, d := range []PerftestDest{
		{LID: 0, OutReads: 0x80, QPN: 0x16, PSN: 0x6e97cc, RKey: 0x7de, VAddr: 0x55a521a58000, GID: GIDFromAddr(mustAddr(t, "198.51.100.2"))},
		{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: ^uint64(0), GID: GIDFromAddr(mustAddr(t, "2001:db8::1")), SRQN: 0xdeadbeef},
		{LID: 7, OutReads: 1, QPN: 0x11, PSN: 1, RKey: 2, VAddr: 3, NoGID: true, SRQN: 9},
	} {
		b, err := d.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want := PerftestKeyLen
		if d.NoGID {
			want = PerftestKeyLenNoGID
		}
		if len(b) != want || b[len(b)-1] != 0 {
			t.Errorf("%+v: %d bytes %q, want %d ending in NUL", d, len(b), b, want)
		}
		got, err := UnmarshalPerftestDest(b)
		if err != nil {
			t.Fatal(err)
		}
		if got != d {
			t.Errorf("round trip: got %+v, want %+v", got, d)
		}
	}
	for _, bad := range []string{
		"",
		"0000:0001:000015:150e86:0000061c:0000562ccecf9000:00:00",
		"0000:0001:000015:150e86:0000061c:0000562ccecf900:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:0c:00000000:",
		"0000:0001:000015:150e86:0000061c:0000562ccecf9000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:0g:00000000:",
		"0000:0001:000015:150e86:0000061c:0000562ccecf9000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:0c:0000000:",
	} {
		if _, err := UnmarshalPerftestDest([]byte(bad)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: err %v, want ErrProtocol", bad, err)
		}
	}
}

// A peer that closes mid-exchange gives ErrProtocol, and a context that ends unblocks a side
// waiting for a peer that never answers.
func TestPerftestPeerFailures(t *testing.T) {
	c, s := testenv.TCPPair(t)
	go func(s net.Conn) {
		b := make([]byte, 16)
		s.Read(b)
		s.Write([]byte("6.06\x00\x00")) // 6 of 16 bytes, then gone
		s.Close()
	}(s)
	_, err := NewPerftestConn(c, true).ExchangeVersions(context.Background(), "")
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("peer closing mid-message: %v, want ErrProtocol saying the peer closed", err)
	}

	c, _ = testenv.TCPPair(t) // the server never answers
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = NewPerftestConn(c, true).ExchangeVersions(ctx, "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent peer: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("returned after %v", d)
	}

	c, s = testenv.TCPPair(t)
	go func(s net.Conn) {
		b := make([]byte, 16)
		s.Read(b)
		s.Write(append([]byte("hello, world!!!"), 0))
	}(s)
	if _, err := NewPerftestConn(c, true).ExchangeVersions(context.Background(), ""); !errors.Is(err, ErrProtocol) {
		t.Errorf("non-perftest peer: %v, want ErrProtocol", err)
	}
}

// Against an older perftest the formats change with its version: no system data before 5.32,
// a 4-byte MTU before 5.31, 4-byte iteration counts before 5.33.
func TestPerftestOldPeer(t *testing.T) {
	c, s := testenv.TCPPair(t)
	peer := NewPerftestConn(s, false)
	errc := make(chan error, 1)
	var got []byte
	go func() {
		rec := &writeLog{Conn: s}
		peer.Conn = rec
		if _, err := peer.ExchangeVersions(context.Background(), "5.30"); err != nil {
			errc <- err
			return
		}
		// What this side sends follows the peer's version: no system data, a 4-byte MTU, then
		// (raw exchanges below) an 8-byte size and a 4-byte iteration count.
		b := make([]byte, 4+8+4)
		_, err := io.ReadFull(s, b[:4]) // MTU, 4 bytes
		if err == nil {
			s.Write([]byte("2\x00\x00\x00"))
			_, err = io.ReadFull(s, b[4:12]) // size
		}
		if err == nil {
			s.Write(make([]byte, 8))
			_, err = io.ReadFull(s, b[12:16]) // iterations, 4 bytes
			s.Write([]byte{0, 0, 0, 9})
		}
		got = b
		errc <- err
	}()
	pc := NewPerftestConn(c, true)
	if _, err := pc.ExchangeVersions(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := pc.ExchangeSysData(context.Background(), 4096, 64); ok || err != nil {
		t.Fatalf("system data with a 5.30 peer: ok %v err %v, want nothing exchanged", ok, err)
	}
	mtu, err := pc.ExchangeMTU(context.Background(), 3)
	if err != nil || mtu != 2 {
		t.Fatalf("mtu %d err %v, want the peer's smaller 2", mtu, err)
	}
	// Only size and iterations: the peer test goroutine stops there, so use raw exchanges.
	b, err := pc.Exchange(context.Background(), []byte{0, 0, 0, 0, 0, 0, 0x10, 0})
	if err != nil || len(b) != 8 {
		t.Fatal(err)
	}
	rem, err := pc.Exchange(context.Background(), []byte{0, 0, 0, 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:4], []byte("3\x00\x00\x00")) || !bytes.Equal(rem, []byte{0, 0, 0, 9}) {
		t.Errorf("sent mtu %q, got iterations %v", got[:4], rem)
	}
}

func TestPingpongPeerFailures(t *testing.T) {
	c, s := testenv.TCPPair(t)
	go func(s net.Conn) {
		b := make([]byte, PingpongMsgLen)
		s.Read(b)
		s.Write(bytes.Repeat([]byte("x"), PingpongMsgLen))
	}(s)
	if _, err := DialPingpong(context.Background(), c, PingpongDest{QPN: 1}); !errors.Is(err, ErrProtocol) {
		t.Errorf("garbage answer: %v, want ErrProtocol", err)
	}

	c, s = testenv.TCPPair(t)
	go func(s net.Conn) {
		d, _ := PingpongDest{QPN: 2}.Marshal()
		s.Write(d)
		b := make([]byte, PingpongMsgLen)
		s.Read(b)
		s.Close() // no "done"
	}(s)
	called := false
	_, err := ServePingpong(context.Background(), c, PingpongDest{QPN: 3}, func(PingpongDest) error { called = true; return nil })
	if !errors.Is(err, ErrProtocol) || !called {
		t.Errorf("client without done: %v (connect called %v), want ErrProtocol after connect", err, called)
	}

	c, s = testenv.TCPPair(t)
	go func(s net.Conn) {
		d, _ := PingpongDest{QPN: 2}.Marshal()
		s.Write(d)
	}(s)
	boom := errors.New("qp: bad attribute")
	if _, err := ServePingpong(context.Background(), c, PingpongDest{QPN: 3}, func(PingpongDest) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("connect failure: %v, want it wrapped", err)
	}

	c, _ = testenv.TCPPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := ServePingpong(ctx, c, PingpongDest{}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent client: %v, want DeadlineExceeded", err)
	}
	var _ net.Conn = c
}

func TestGIDText(t *testing.T) {
	g := GIDFromAddr(mustAddr(t, "198.51.100.2"))
	if g.String() != "::ffff:198.51.100.2" || g.Hex() != "00000000000000000000ffffc6336402" || g.Addr().String() != "198.51.100.2" {
		t.Errorf("gid %v hex %s addr %v", g, g.Hex(), g.Addr())
	}
	for _, in := range []string{"::ffff:198.51.100.2", "198.51.100.2", "00000000000000000000ffffc6336402"} {
		var h GID
		if err := h.UnmarshalText([]byte(in)); err != nil || h != g {
			t.Errorf("%q: %v %v", in, h, err)
		}
	}
	var h GID
	if err := h.UnmarshalText([]byte("nope")); err == nil {
		t.Error("bad gid accepted")
	}
}
