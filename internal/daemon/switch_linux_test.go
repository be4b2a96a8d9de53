package daemon

import (
	"bytes"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/link/shm"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

var (
	localIP  = netip.MustParseAddr("198.51.100.1")
	remoteIP = netip.MustParseAddr("198.51.100.2")
	localMAC = [6]byte{0x02, 0, 0, 0, 0, 1}
)

// testSwitch is a daemon without a socket: its uplink is one end of a pipe
// (wire is the other), and clients are added by hand.
type testSwitch struct {
	d    *Daemon
	wire *pipe.Link
}

func newTestSwitch(t testing.TB) *testSwitch {
	up, wireEnd, err := pipe.New(pipe.Config{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{clients: map[int]*client{}, nextID: 1, upDone: make(chan struct{}), hw: localMAC, shift: 12,
		log: slog.New(slog.DiscardHandler)}
	d.up = &roce.Uplink{Link: up, Name: "test0", Addrs: []netip.Addr{localIP}}
	d.owners = make([]atomic.Pointer[client], 1<<12)
	d.local = [][16]byte{localIP.As16()}
	d.eg.init(up.Props().MaxFrame, 8)
	t.Cleanup(func() { up.Close(); wireEnd.Close() })
	return &testSwitch{d: d, wire: wireEnd}
}

// addClient gives block b to a new client and returns the daemon's record
// and the client's end of its port.
func (s *testSwitch) addClient(t testing.TB, b int) (*client, *shm.Link) {
	port, fds, err := shm.NewPort(shm.Config{MTU: 4200, Ring: 16})
	if err != nil {
		t.Fatal(err)
	}
	end, err := shm.Attach(fds)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{d: s.d, id: b, port: port}
	s.d.nextBlock = b
	s.d.takeBlock(c)
	t.Cleanup(func() { port.Close(); end.Close() })
	return c, end
}

// frame encodes a RoCEv2 frame from src to dst for dqpn (UD with source
// QPN sqpn when ud).
func frame(t testing.TB, src, dst netip.Addr, dqpn uint32, ud bool, sqpn uint32) []byte {
	p := wire.Packet{SrcMAC: [6]byte{0x02, 9, 9, 9, 9, 9}, SrcIP: src, DstIP: dst, TTL: 64,
		SrcPort: 49152, DstPort: 4791, Payload: []byte("payload!")}
	p.BTH.Opcode, p.BTH.DestQPN, p.BTH.PKey = wire.RCSendOnly, dqpn, 0xFFFF
	if ud {
		p.BTH.Opcode = wire.UDSendOnly
		p.DETH = wire.DETH{QKey: 0x1234, SrcQPN: sqpn}
	}
	b := make([]byte, 256)
	n, err := p.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// recv returns the frames waiting at the client's end.
func recv(l *shm.Link) [][]byte {
	var out [][]byte
	fr := make([][]byte, 16)
	n, _ := l.Receive(fr)
	for _, f := range fr[:n] {
		out = append(out, bytes.Clone(f))
	}
	return out
}

// TestSteering: frames from the wire reach the client owning their
// destination QPN; frames between clients go port to port (the source MAC
// untouched) and never to the uplink; frames to remote addresses go to the
// uplink with the interface's MAC as source; QP1, unowned QPNs, foreign
// UD source QPNs, foreign source addresses and garbage are dropped and
// counted.
func TestSteering(t *testing.T) {
	s := newTestSwitch(t)
	d := s.d
	a, aEnd := s.addClient(t, 1) // QPNs 0x1000..0x1fff
	b, bEnd := s.addClient(t, 2) // QPNs 0x2000..0x2fff
	if a.first != 0x1000 || a.last != 0x1fff || d.owner(0x2abc) != b || d.owner(0x3000) != nil {
		t.Fatalf("blocks: a %#x..%#x, owner(0x2abc) %v", a.first, a.last, d.owner(0x2abc))
	}
	if f, l := d.blockRange(0); f != 0x11 || l != 0xfff {
		t.Errorf("block 0: %#x..%#x", f, l)
	}
	if f, l := d.blockRange(4095); f != 0xfff000 || l != 0xfffffe {
		t.Errorf("last block: %#x..%#x", f, l)
	}

	// Wire to client.
	in := frame(t, remoteIP, localIP, 0x2005, false, 0)
	d.fromWire(in)
	if got := recv(bEnd); len(got) != 1 || !bytes.Equal(got[0], in) {
		t.Errorf("b got %d frames from the wire, want the one byte-exact", len(got))
	}
	if got := recv(aEnd); len(got) != 0 {
		t.Errorf("a got %d frames meant for b", len(got))
	}

	// Client to client, RC and UD from a's own QPN.
	for _, f := range [][]byte{frame(t, localIP, localIP, 0x2001, false, 0), frame(t, localIP, localIP, 0x2001, true, 0x1003)} {
		d.fromClient(a, f)
		if got := recv(bEnd); len(got) != 1 || !bytes.Equal(got[0], f) {
			t.Errorf("b got %d frames from a, want the one byte-exact", len(got))
		}
	}
	if d.st.switched.Load() != 2 || d.eg.count != 0 {
		t.Errorf("switched %d, queued to the wire %d", d.st.switched.Load(), d.eg.count)
	}

	// Client to the wire.
	out := frame(t, localIP, remoteIP, 0x77, false, 0)
	d.fromClient(a, out)
	if d.eg.count != 1 {
		t.Fatalf("queued to the wire: %d", d.eg.count)
	}
	d.eg.drain(d.up.Link, d.st.uplinkTx[:], &d.st)
	fr := make([][]byte, 4)
	deadline := time.Now().Add(time.Second)
	n := 0
	for n == 0 && time.Now().Before(deadline) {
		s.wire.Wait(10 * time.Millisecond)
		n, _ = s.wire.Receive(fr)
	}
	want := bytes.Clone(out)
	copy(want[6:12], localMAC[:])
	if n != 1 || !bytes.Equal(fr[0], want) {
		t.Errorf("wire got %d frames, want the one with the interface's source MAC", n)
	}

	// Drops.
	for _, tc := range []struct {
		name string
		f    []byte
		ctr  func() uint64
	}{
		{"UD from b's QPN", frame(t, localIP, localIP, 0x2001, true, 0x2002), a.dropForeign.Load},
		{"UD from QP1 without a MAD", frame(t, localIP, remoteIP, 1, true, 1), a.dropMalformed.Load},
		{"foreign source address", frame(t, remoteIP, localIP, 0x2001, false, 0), a.dropBadSource.Load},
		{"garbage", []byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x08\x00garbage"), a.dropMalformed.Load},
		{"QP1", frame(t, localIP, localIP, 1, false, 0), d.st.dropQP1.Load},
		{"no owner", frame(t, localIP, localIP, 0x5000, false, 0), d.st.dropNoOwner.Load},
	} {
		before := tc.ctr()
		d.fromClient(a, tc.f)
		if tc.ctr() != before+1 {
			t.Errorf("%s: counter %d, want %d", tc.name, tc.ctr(), before+1)
		}
		if got := recv(bEnd); len(got) != 0 || d.eg.count != 0 {
			t.Errorf("%s: b got %d frames, %d queued to the wire", tc.name, len(got), d.eg.count)
		}
	}
}

// FuzzClientFrame feeds arbitrary frames from client a into the switch
// (including ones built to look like RoCEv2 and CM MADs): nothing panics,
// and whatever reaches client b or the wire parses as RoCEv2 from one of
// the interface's addresses, delivered byte-exact: b's only frames
// addressed to b's QPNs (UD ones from a's QPNs), or from a's QP1 a CM MAD
// carrying a's communication ID for b's service ID or b's communication ID
// (b listens on one service ID; b joined no group).
func FuzzClientFrame(f *testing.F) {
	f.Add(frame(f, localIP, localIP, 0x2001, false, 0))
	f.Add(frame(f, localIP, localIP, 0x2001, true, 0x1001))
	f.Add(frame(f, localIP, localIP, 0x2001, true, 0x2001))
	f.Add(frame(f, localIP, remoteIP, 0x2001, false, 0))
	f.Add(frame(f, remoteIP, localIP, 0x2001, false, 0))
	f.Add(frame(f, localIP, netip.MustParseAddr("239.1.2.3"), mcastQPN, true, 0x1001))
	sid := rdmacm.ServiceID(rdmacm.PSTCP, 7471)
	f.Add(madFrame(f, localIP, localIP, 1, &rdmacm.REQ{LocalCommID: 0x100001, ServiceID: sid}))
	f.Add(madFrame(f, localIP, localIP, 1, &rdmacm.REQ{LocalCommID: 0x200001, ServiceID: sid}))
	f.Add(madFrame(f, localIP, localIP, 1, &rdmacm.REP{LocalCommID: 0x100001, RemoteCommID: 0x200001}))
	f.Add(madFrame(f, localIP, localIP, 1, &rdmacm.REJ{RemoteCommID: 0x200001}))
	f.Add(madFrame(f, localIP, remoteIP, 1, &rdmacm.DREQ{LocalCommID: 0x100001, RemoteCommID: 0x200001}))
	f.Add([]byte{})
	s := newTestSwitch(f)
	a, _ := s.addClient(f, 1)
	b, bEnd := s.addClient(f, 2)
	if err := s.d.listen(b, sid); err != nil {
		f.Fatal(err)
	}
	var h header
	// fromA: a CM MAD a's QP1 may send.
	fromA := func(got []byte, h *header) bool {
		mad := madOf(got, h)
		if mad == nil || h.sqpn != 1 || h.dqpn != 1 {
			return false
		}
		if _, err := rdmacm.ParseHeader(mad); err != nil {
			return false
		}
		return s.d.mayCMSend(a, mad)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 4218 {
			in = in[:4218]
		}
		s.d.fromClient(a, in)
		for _, got := range recv(bEnd) {
			if place.Is(in) && place.Is(got) {
				continue // FuzzPlacement's
			}
			ok := bytes.Equal(got, in) && parse(got, &h) && s.d.isLocal(&h.src) && s.d.isLocal(&h.dst)
			if ok && h.dqpn == 1 {
				to, _ := s.d.madRoute(madOf(got, &h))
				ok = fromA(got, &h) && to == b
			} else {
				ok = ok && h.dqpn >= b.first && h.dqpn <= b.last && !(h.ud && (h.sqpn < a.first || h.sqpn > a.last))
			}
			if !ok {
				t.Fatalf("b got % x from % x", got, in)
			}
		}
		q := &s.d.eg
		for q.count > 0 {
			got := q.slots[q.head][:q.lens[q.head]]
			if !parse(got, &h) || !s.d.isLocal(&h.src) || s.d.isLocal(&h.dst) ||
				h.ud && (h.sqpn < a.first || h.sqpn > a.last) && !(h.sqpn == 1 && fromA(got, &h)) ||
				!bytes.Equal(got[12:], in[12:]) || !bytes.Equal(got[6:12], localMAC[:]) {
				t.Fatalf("queued to the wire % x from % x", got, in)
			}
			q.head = (q.head + 1) % len(q.slots)
			q.count--
		}
	})
}
