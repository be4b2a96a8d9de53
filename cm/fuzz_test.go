package cm

import (
	"context"
	"net"
	"testing"
	"time"
)

// The parsers take bytes from the network: never a panic, and what they accept marshals back
// to an equal value.

func FuzzPingpongDest(f *testing.F) {
	f.Add([]byte("0000:000011:c829ba:00000000000000000000ffffc000020c\x00"))
	f.Add([]byte("ffff:ffffff:ffffff:ffffffffffffffffffffffffffffffff"))
	f.Add([]byte("0000:000011:c829ba:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := UnmarshalPingpongDest(b)
		if err != nil {
			return
		}
		m, err := d.Marshal()
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal %+v: %v", b, d, err)
		}
		d2, err := UnmarshalPingpongDest(m)
		if err != nil || d2 != d {
			t.Fatalf("round trip of %q: %+v → %q → %+v, %v", b, d, m, d2, err)
		}
	})
}

func FuzzPerftestDest(f *testing.F) {
	f.Add([]byte("0000:0001:000015:150e86:0000061c:0000562ccecf9000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:0c:00000000:\x00"))
	f.Add([]byte("0000:0001:000011:000001:00000002:0000000000000003:00000009\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := UnmarshalPerftestDest(b)
		if err != nil {
			return
		}
		m, err := d.Marshal()
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal %+v: %v", b, d, err)
		}
		d2, err := UnmarshalPerftestDest(m)
		if err != nil || d2 != d {
			t.Fatalf("round trip of %q: %+v → %q → %+v, %v", b, d, m, d2, err)
		}
	})
}

// FuzzControlRecv feeds arbitrary bytes to a control connection: Recv returns a message or an
// error and never panics.
func FuzzControlRecv(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x31{\"type\":\"hello\",\"proto\":\"xdproce-cm\",\"version\":1}"))
	f.Add([]byte("\x00\x00\x00\x02{}"))
	f.Add([]byte("\xff\xff\xff\xff"))
	f.Add([]byte("\x00\x00\x00\x0b{\"type\":1}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, c := net.Pipe()
		defer a.Close()
		defer c.Close()
		go func() { a.Write(b); a.Close() }()
		conn := newConn(c, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for range 4 {
			m, err := conn.Recv(ctx)
			if err != nil {
				return
			}
			if m.Type == "" {
				t.Fatalf("message without type from %q", b)
			}
		}
	})
}
