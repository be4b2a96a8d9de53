package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestSRQPingpongExchange: the client's 256 messages carry its queue pairs' addresses then
// zeros; the server connects with the client's addresses before it answers; a malformed
// address is a protocol error.
func TestSRQPingpongExchange(t *testing.T) {
	gid := GIDFromAddr(netip.MustParseAddr("198.51.100.1"))
	locals := []PingpongDest{{QPN: 0x11, PSN: 0xabcdef, GID: gid}, {QPN: 0x12, PSN: 1, GID: gid}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go func() {
		remotes, err := DialSRQPingpong(ctx, c, locals)
		if err != nil || len(remotes) != 2 || remotes[1].QPN != 0x22 {
			t.Errorf("client: %v %v", remotes, err)
		}
	}()
	buf := make([]byte, SRQPingpongMsgs*PingpongMsgLen)
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:PingpongMsgLen-1]); got != "0000:000011:abcdef:00000000000000000000ffffc6336401" {
		t.Errorf("first message %q", got)
	}
	zero := append([]byte("0000:000000:000000:"+string(bytes.Repeat([]byte("0"), 32))), 0)
	for i := 2; i < SRQPingpongMsgs; i++ {
		if m := buf[i*PingpongMsgLen : (i+1)*PingpongMsgLen]; !bytes.Equal(m, zero) {
			t.Fatalf("message %d %q, want zeros", i, m)
		}
	}
	answer, err := marshalDests([]PingpongDest{{QPN: 0x21, GID: gid}, {QPN: 0x22, GID: gid}})
	if err != nil {
		t.Fatal(err)
	}
	s.Write(answer)
	done := make([]byte, 5)
	if _, err := io.ReadFull(s, done); err != nil || string(done) != "done\x00" {
		t.Fatalf("done %q %v", done, err)
	}

	c2, s2 := net.Pipe()
	defer c2.Close()
	defer s2.Close()
	go func() {
		bad := bytes.Repeat([]byte("x"), SRQPingpongMsgs*PingpongMsgLen)
		c2.Write(bad)
	}()
	connected := false
	_, err = ServeSRQPingpong(ctx, s2, locals, func([]PingpongDest) error { connected = true; return nil })
	if !errors.Is(err, ErrProtocol) || connected {
		t.Fatalf("malformed addresses: %v (connected %v)", err, connected)
	}
}
