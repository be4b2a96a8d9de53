package xsk_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/xsk"
	"github.com/xdproce/xdproce/roce/wire"
)

// end is one side of a lab: AF_XDP sockets on the interface plus the
// steering program.
type end struct {
	If   *netlab.Iface
	Dev  *xsk.Device
	Sock *xsk.Socket // queue 0
	Prog *bpf.Program
}

// openEnd opens AF_XDP sockets on e and attaches the steering program in mode.
func openEnd(t testing.TB, e *netlab.Iface, mode bpf.Mode, cfg *xsk.Config) *end {
	t.Helper()
	r := &end{If: e}
	err := e.NS.Do(func() error {
		var err error
		if r.Dev, err = xsk.Open(e.Name, cfg); err != nil {
			return err
		}
		var ips []netip.Addr
		for _, ip := range []netip.Addr{e.IPv4, e.IPv6} {
			if ip.IsValid() {
				ips = append(ips, ip)
			}
		}
		r.Prog, err = bpf.Attach(e.Name, ips, r.Dev.FDs(), &bpf.Options{Mode: mode})
		return err
	})
	if r.Dev != nil {
		t.Cleanup(func() { r.Dev.Close() })
	}
	if r.Prog != nil {
		t.Cleanup(func() { r.Prog.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	r.Dev.SetXDPMode(r.Prog.Mode().String())
	r.Sock = r.Dev.Sockets[0]
	return r
}

// putRoCE writes into b a RoCEv2 frame from src to dst of total length n
// (n ≥ 58): Ethernet, IPv4 (DF, ID 0), UDP to 4791, a BTH (RC SEND ONLY to
// QPN 0x11, PSN = seq), a payload pattern derived from seq, and the ICRC
// (roce/wire). It returns b[:n].
func putRoCE(b []byte, src, dst *netlab.Iface, seq uint32, n int) []byte {
	b = b[:n]
	copy(b[0:6], dst.HWAddr)
	copy(b[6:12], src.HWAddr)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	binary.BigEndian.PutUint32(ip[4:], 0x00004000) // ID 0, DF
	ip[8], ip[9] = 64, 17
	ip[10], ip[11] = 0, 0
	s4, d4 := src.IPv4.As4(), dst.IPv4.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 49441)
	binary.BigEndian.PutUint16(udp[2:], wire.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(n-34))
	binary.BigEndian.PutUint16(udp[6:], 0)
	bth := b[42:54]
	bth[0], bth[1] = 0x04, 0 // RC SEND ONLY
	binary.BigEndian.PutUint16(bth[2:], 0xffff)
	binary.BigEndian.PutUint32(bth[4:], 0x11)
	binary.BigEndian.PutUint32(bth[8:], 0x80000000|seq&0xffffff)
	for i := 54; i < n-4; i++ {
		b[i] = byte(int(seq) + i)
	}
	if err := wire.SetICRC(b); err != nil {
		panic(err)
	}
	return b
}

// checkRoCE verifies a frame written by putRoCE (length, ICRC, payload) and
// returns its seq.
func checkRoCE(f []byte, n int) (uint32, bool) {
	if len(f) != n || n < 58 || binary.BigEndian.Uint16(f[36:]) != wire.UDPPort || wire.VerifyICRC(f) != nil {
		return 0, false
	}
	seq := binary.BigEndian.Uint32(f[50:]) & 0xffffff
	for i := 54; i < n-4; i++ {
		if f[i] != byte(int(seq)+i) {
			return seq, false
		}
	}
	return seq, true
}

// exchange sends count frames of size n from a to b and checks they arrive
// whole and in order. It returns the elapsed time.
func exchange(t testing.TB, a, b *end, count, n int) time.Duration {
	t.Helper()
	bufs := make([][]byte, 64)
	rx := make([][]byte, 256) // more than the 64 reassembly buffers of a multi-buffer socket
	sent, got := 0, 0
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for got < count {
		if time.Now().After(deadline) {
			st, _ := b.Sock.Stats()
			c, _ := b.Prog.Counters()
			t.Fatalf("received %d of %d frames (%d sent) of %d bytes in 10s; rx stats %+v; xdp counters %v", got, count, sent, n, st, c)
		}
		if sent < count {
			k := a.Sock.Alloc(bufs[:min(len(bufs), count-sent)])
			for i := range k {
				bufs[i] = putRoCE(bufs[i], a.If, b.If, uint32(sent+i), n)
			}
			if err := a.Sock.Send(bufs[:k]); err != nil {
				t.Fatal(err)
			}
			sent += k
		}
		m, err := b.Sock.Receive(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[:m] {
			seq, ok := checkRoCE(f, n)
			if !ok {
				t.Fatalf("frame %d: bad content (len %d, seq %d)", got, len(f), seq)
			}
			if seq != uint32(got) {
				t.Fatalf("frame %d has seq %d", got, seq)
			}
			got++
		}
		if m == 0 && sent >= count {
			b.Sock.Wait(10 * time.Millisecond)
		}
	}
	return time.Since(start)
}
