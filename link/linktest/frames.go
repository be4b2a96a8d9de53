package linktest

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/roce/wire"
)

// transfer sends frames of the given sizes from a to b (batches of up to 16
// per Send) and checks that they arrive intact and in order.
func transfer(t *testing.T, a, b end, ns []int, seq uint32) {
	t.Helper()
	want := buildFrames(a, b, ns, seq)
	for i := 0; i < len(want); i += 16 {
		j := min(i+16, len(want))
		if err := sendRaw(a.l, want[i:j]); err != nil {
			t.Fatalf("Send: %v", err)
		}
		recvExpect(t, a, b, want[i:j])
		if t.Failed() {
			return
		}
	}
}

func sendFrames(a, b end, ns []int, seq uint32) error {
	return sendRaw(a.l, buildFrames(a, b, ns, seq))
}

func sendRaw(l link.Link, frames [][]byte) error {
	bufs := make([][]byte, len(frames))
	got := 0
	deadline := time.Now().Add(Timeout)
	for got < len(bufs) {
		got += l.Alloc(bufs[got:])
		if got < len(bufs) {
			if time.Now().After(deadline) {
				l.Free(bufs[:got])
				return errors.New("linktest: Alloc gave too few buffers")
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, f := range frames {
		n := copy(bufs[i], f)
		if n != len(f) {
			l.Free(bufs)
			return errors.New("linktest: frame longer than the buffer")
		}
		bufs[i] = bufs[i][:n]
	}
	return l.Send(bufs)
}

// recvExpect receives len(want) frames on b and compares them with want, in
// order.
func recvExpect(t *testing.T, a, b end, want [][]byte) {
	t.Helper()
	synth := b.l.Props().SyntheticHeaders || a.l.Props().SyntheticHeaders
	frames := make([][]byte, 64)
	got := 0
	deadline := time.Now().Add(Timeout)
	for got < len(want) {
		n, err := b.l.Receive(frames)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, f := range frames[:n] {
			if got >= len(want) {
				t.Errorf("unexpected extra frame of %d bytes", len(f))
				continue
			}
			if !sameFrame(want[got], f, synth) {
				t.Errorf("frame %d (of %d bytes): received %d bytes that differ:\nwant % x\ngot  % x",
					got, len(want[got]), len(f), head(want[got]), head(f))
			}
			got++
		}
		if n > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d frames (sizes %v) within %v", got, len(want), lens(want), Timeout)
		}
		if err := b.l.Wait(50 * time.Millisecond); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 80)] }

func lens(fs [][]byte) []int {
	n := make([]int, len(fs))
	for i, f := range fs {
		n[i] = len(f)
	}
	return n
}

// l3 returns the IP packet of an Ethernet frame (after one optional VLAN
// tag), trimmed to the IP length.
func l3(f []byte) []byte {
	if len(f) < 14 {
		return nil
	}
	et := binary.BigEndian.Uint16(f[12:])
	p := f[14:]
	if et == 0x8100 && len(f) >= 18 {
		et = binary.BigEndian.Uint16(f[16:])
		p = f[18:]
	}
	switch {
	case et == 0x0800 && len(p) >= 20:
		n := int(binary.BigEndian.Uint16(p[2:]))
		if n > len(p) {
			return nil
		}
		return p[:n]
	case et == 0x86dd && len(p) >= 40:
		n := 40 + int(binary.BigEndian.Uint16(p[4:]))
		if n > len(p) {
			return nil
		}
		return p[:n]
	}
	return nil
}

// sameFrame compares a received frame with the one sent: whole when the
// link passes frames through; from the IP addresses on (addresses, UDP
// ports and length, payload) when headers are synthesised. An IPv4
// Identification is then the receiving kernel's or the sending one's, and
// the ICRC, which covers it, may differ with it: a right one must stay
// right.
func sameFrame(want, got []byte, synth bool) bool {
	if !synth {
		return string(want) == string(got)
	}
	w, g := l3(want), l3(got)
	if w == nil || g == nil || len(w) != len(g) || w[0]>>4 != g[0]>>4 {
		return false
	}
	if w[0]>>4 == 4 {
		// Protocol, addresses, then UDP (checksum excepted) and payload.
		if w[9] != g[9] || string(w[12:26]) != string(g[12:26]) {
			return false
		}
		if wire.VerifyICRC(want) == nil {
			return string(w[28:len(w)-wire.ICRCLen]) == string(g[28:len(g)-wire.ICRCLen]) && wire.VerifyICRC(got) == nil
		}
		return string(w[28:]) == string(g[28:])
	}
	return w[6] == g[6] && string(w[8:46]) == string(g[8:46]) && string(w[48:]) == string(g[48:])
}

// buildFrames makes RoCEv2-shaped frames of the given sizes from a to b:
// Ethernet (VLAN-tagged when the IP packet would exceed the MTU otherwise),
// IPv4 with DF or IPv6, UDP to 4791 from a's SrcPort (or 0xC000), then a
// payload starting with a sequence number and a size-dependent pattern,
// ending in the ICRC.
func buildFrames(a, b end, ns []int, seq uint32) [][]byte {
	pa, pb := a.l.Props(), b.l.Props()
	sport := pa.SrcPort
	if sport == 0 {
		sport = 0xC000
	}
	out := make([][]byte, len(ns))
	for i, n := range ns {
		f := make([]byte, n)
		if len(pb.HWAddr) == 6 {
			copy(f[0:6], pb.HWAddr)
		} else {
			copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0xbb})
		}
		if len(pa.HWAddr) == 6 {
			copy(f[6:12], pa.HWAddr)
		} else {
			copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0xaa})
		}
		eth := 14
		if n-14 > pa.MTU {
			binary.BigEndian.PutUint16(f[12:], 0x8100)
			binary.BigEndian.PutUint16(f[14:], 0x0005) // VLAN 5
			eth = 18
		}
		ip := f[eth:]
		var udp []byte
		if a.addr.Is4() {
			binary.BigEndian.PutUint16(f[eth-2:], 0x0800)
			ip[0] = 0x45
			binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
			binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
			ip[8] = 64
			ip[9] = 17
			s4, d4 := a.addr.As4(), b.addr.As4()
			copy(ip[12:], s4[:])
			copy(ip[16:], d4[:])
			binary.BigEndian.PutUint16(ip[10:], wire.IPv4Checksum(ip[:20]))
			udp = ip[20:]
		} else {
			binary.BigEndian.PutUint16(f[eth-2:], 0x86dd)
			ip[0] = 0x60
			binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40))
			ip[6] = 17
			ip[7] = 64
			s16, d16 := a.addr.As16(), b.addr.As16()
			copy(ip[8:], s16[:])
			copy(ip[24:], d16[:])
			udp = ip[40:]
		}
		binary.BigEndian.PutUint16(udp[0:], sport)
		binary.BigEndian.PutUint16(udp[2:], 4791)
		binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
		pl := udp[8:]
		// A BTH-like start: opcode UD SEND_ONLY, then the sequence number.
		pl[0] = 0x64
		if len(pl) >= 8 {
			binary.BigEndian.PutUint32(pl[4:], seq+uint32(i))
		}
		for j := 8; j < len(pl); j++ {
			pl[j] = byte(j*7 + n + i)
		}
		// A right ICRC over the last four bytes, as the engine sends: a
		// link that rewrites the IPv4 Identification (link/udp) and
		// recovers it from the ICRC would, for a wrong one, find an
		// Identification that explains it once in 65536 frames (16 unknown
		// bits against 32), and rightly alter that frame. Frames too short
		// for a BTH and an ICRC keep the pattern.
		_ = wire.SetICRC(f)
		out[i] = f
	}
	return out
}
