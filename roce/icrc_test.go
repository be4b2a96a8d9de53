package roce_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// syntheticLink is a pipe end that says its received headers are rebuilt,
// as link/udp does.
type syntheticLink struct{ *pipe.Link }

func (l syntheticLink) Props() link.Props {
	p := l.Link.Props()
	p.SyntheticHeaders = true
	return p
}

// TestBadICRCDroppedOnSyntheticLink: the engine accepts no ICRC mismatch,
// not even one an IPv4 Identification change would explain on a link with
// synthetic headers (the link puts the sender's ID back itself: link/udp
// recovers it). The frame is dropped and counted as DropBadICRC.
func TestBadICRCDroppedOnSyntheticLink(t *testing.T) {
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	d, err := roce.NewDevice(syntheticLink{la}, &roce.Options{Addrs: []netip.Addr{addrA}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	encode := func(id uint16, buf []byte) []byte {
		p := wire.Packet{
			SrcIP: addrB, DstIP: addrA, TTL: 64, IPID: id, IPFlags: 2, SrcPort: 49441, DstPort: wire.UDPPort,
			BTH:     wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQPN: 0x11, PSN: 1, AckReq: true},
			Payload: []byte("rebuilt header"),
		}
		n, err := p.Encode(buf)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	sent := encode(0x1234, make([]byte, 256))
	bufs := make([][]byte, 1)
	if lb.Alloc(bufs) != 1 {
		t.Fatal("pipe: no transmit buffer")
	}
	// The frame as a link that lost the ID delivers it: ID 0, the sender's ICRC.
	f := encode(0, bufs[0])
	copy(f[len(f)-4:], sent[len(sent)-4:])
	if id, ok := wire.RecoverIPv4ID(f); !ok || id != 0x1234 {
		t.Fatalf("test frame: RecoverIPv4ID = %#x, %v; want the sent ID 0x1234", id, ok)
	}
	if err := lb.Send([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for d.Stats().RxFrames == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the device received nothing in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if st := d.Stats(); st.RxFrames != 1 || st.DropBadICRC != 1 || st.DropUnknownQPN != 0 {
		t.Errorf("stats %+v: want the one frame dropped for its ICRC", st)
	}
}

// checkingLink is a pipe end that reports every received frame's ICRC as
// verified (link.ICRCChecker), as link/udp does for the frames whose IPv4
// Identification it recovered.
type checkingLink struct{ *pipe.Link }

func (checkingLink) ICRCChecked(int) bool { return true }

// TestICRCCheckedByLink: a frame the link reports ICRC-checked is not
// hashed again by the engine (a frame with a wrong ICRC so reported goes
// on to its queue pair lookup: here an unknown QPN), while the same frame
// from a link that does not check is dropped for its ICRC. The engine
// trusts only what the link says of each frame; link/udp's side is
// TestGROScatter and TestICRCSurvivesKernelHeaders.
func TestICRCCheckedByLink(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wrap    func(*pipe.Link) link.Link
		badICRC uint64
		unknown uint64
	}{
		{"checked by the link", func(l *pipe.Link) link.Link { return checkingLink{l} }, 0, 1},
		{"not checked", func(l *pipe.Link) link.Link { return l }, 1, 0},
	} {
		la, lb, err := pipe.New(pipe.Config{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := roce.NewDevice(tc.wrap(la), &roce.Options{Addrs: []netip.Addr{addrA}})
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([][]byte, 1)
		if lb.Alloc(bufs) != 1 {
			t.Fatal("pipe: no transmit buffer")
		}
		p := wire.Packet{
			SrcIP: addrB, DstIP: addrA, TTL: 64, IPFlags: 2, SrcPort: 49441, DstPort: wire.UDPPort,
			BTH:     wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQPN: 0x11, PSN: 1, AckReq: true},
			Payload: []byte("wrong ICRC"),
		}
		n, err := p.Encode(bufs[0])
		if err != nil {
			t.Fatal(err)
		}
		f := bufs[0][:n]
		f[n-1] ^= 0x5a // the ICRC's last byte
		if err := lb.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for d.Stats().RxFrames == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the device received nothing in 5 s", tc.name)
			}
			time.Sleep(time.Millisecond)
		}
		if st := d.Stats(); st.DropBadICRC != tc.badICRC || st.DropUnknownQPN != tc.unknown {
			t.Errorf("%s: stats %+v: want %d dropped for the ICRC, %d for the unknown QPN", tc.name, st, tc.badICRC, tc.unknown)
		}
		d.Close()
		lb.Close()
	}
}
