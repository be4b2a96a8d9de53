package daemon

import (
	"bytes"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"

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
	d       *Daemon
	wire    *pipe.Link
	clients []*client
}

func newTestSwitch(t testing.TB) *testSwitch {
	return newTestSwitchOn(t, pipe.Config{MTU: 4200})
}

// newTestSwitchOn is newTestSwitch over a pipe configured by cfg.
func newTestSwitchOn(t testing.TB, cfg pipe.Config) *testSwitch {
	up, wireEnd, err := pipe.New(cfg)
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
	s.clients = append(s.clients, c)
	t.Cleanup(func() { port.Close(); end.Close() })
	return c, end
}

// wireFrames ends every client's batch (as its serving goroutine does),
// sends what the egress queue holds (as the uplink goroutine does) and
// returns the frames that reached the wire, in order.
func (s *testSwitch) wireFrames(t testing.TB) [][]byte {
	t.Helper()
	for _, c := range s.clients {
		c.endBatch()
	}
	if s.d.eg.drain(s.d.up.Link, s.d.st.uplinkTx[:], &s.d.st) {
		t.Fatal("the uplink had no transmit buffer for a queued frame")
	}
	var out [][]byte
	fr := make([][]byte, 16)
	for {
		n, err := s.wire.Receive(fr)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fr[:n] {
			out = append(out, bytes.Clone(f))
		}
		if n < len(fr) {
			return out
		}
	}
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

	// Client to client, RC (to a queue pair of b's connected to a's) and
	// UD from a's own QPN.
	if err := d.connectQP(b, 0x2001, localIP.String(), 0x1003); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]byte{frame(t, localIP, localIP, 0x2001, false, 0), frame(t, localIP, localIP, 0x2001, true, 0x1003)} {
		d.fromClient(a, f)
		if got := recv(bEnd); len(got) != 1 || !bytes.Equal(got[0], f) {
			t.Errorf("b got %d frames from a, want the one byte-exact", len(got))
		}
	}
	if got := s.wireFrames(t); d.st.switched.Load() != 2 || len(got) != 0 {
		t.Errorf("switched %d, sent to the wire %d", d.st.switched.Load(), len(got))
	}

	// Client to the wire: into a transmit buffer, sent at the end of the
	// client's batch.
	out := frame(t, localIP, remoteIP, 0x77, false, 0)
	tx := d.st.wireTx.Load()
	d.fromClient(a, out)
	if n, _ := s.wire.Receive(make([][]byte, 4)); n != 0 || d.eg.count != 0 {
		t.Fatalf("before the batch's end: %d frames on the wire, %d queued", n, d.eg.count)
	}
	want := bytes.Clone(out)
	copy(want[6:12], localMAC[:])
	if got := s.wireFrames(t); len(got) != 1 || !bytes.Equal(got[0], want) || d.st.wireTx.Load() != tx+1 {
		t.Errorf("wire got %d frames (wire_tx +%d), want the one with the interface's source MAC", len(got), d.st.wireTx.Load()-tx)
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
		if got, w := recv(bEnd), s.wireFrames(t); len(got) != 0 || len(w) != 0 {
			t.Errorf("%s: b got %d frames, the wire %d", tc.name, len(got), len(w))
		}
	}
}

// FuzzClientFrame feeds an arbitrary request from client b on its
// connection (connqp and disconnqp among the seeds), then an arbitrary
// frame from client a into the switch (including ones built to look like
// RoCEv2 and CM MADs): nothing panics, b's registered queue pairs are its
// own, and whatever reaches client b or the wire parses as RoCEv2 from one
// of the interface's addresses, delivered byte-exact: b's only frames
// addressed to b's QPNs (UD ones from a's QPNs; RC/UC ones to a queue pair
// b registered as connected to a's at the frame's source address), or
// from a's QP1 a CM MAD carrying a's communication ID for b's service ID
// or b's communication ID (b listens on one service ID; b joined no group).
func FuzzClientFrame(f *testing.F) {
	conn := []byte(`{"op":"connqp","qpn":8193,"gid":"198.51.100.1","peer_qpn":4097}`)
	for _, in := range [][]byte{
		frame(f, localIP, localIP, 0x2001, false, 0),
		frame(f, localIP, localIP, 0x2002, false, 0),
		frame(f, localIP, localIP, 0x2001, true, 0x1001),
		frame(f, localIP, localIP, 0x2001, true, 0x2001),
		frame(f, localIP, remoteIP, 0x2001, false, 0),
		frame(f, remoteIP, localIP, 0x2001, false, 0),
		frame(f, localIP, netip.MustParseAddr("239.1.2.3"), mcastQPN, true, 0x1001),
	} {
		f.Add(conn, in)
	}
	for _, ctl := range []string{`{"op":"disconnqp","qpn":8193}`, `{"op":"connqp","qpn":8194,"gid":"::ffff:198.51.100.1","peer_qpn":4098}`,
		`{"op":"connqp","qpn":8193,"gid":"198.51.100.2","peer_qpn":4097}`, `{"op":"connqp","qpn":4097,"gid":"198.51.100.1","peer_qpn":8193}`,
		`{"op":"connqp","qpn":8193,"gid":"x","peer_qpn":1}`, `garbage`} {
		f.Add([]byte(ctl), frame(f, localIP, localIP, 0x2001, false, 0))
		f.Add([]byte(ctl), frame(f, localIP, localIP, 0x2002, false, 0))
	}
	sid := rdmacm.ServiceID(rdmacm.PSTCP, 7471)
	f.Add(conn, madFrame(f, localIP, localIP, 1, &rdmacm.REQ{LocalCommID: 0x100001, ServiceID: sid}))
	f.Add(conn, madFrame(f, localIP, localIP, 1, &rdmacm.REQ{LocalCommID: 0x200001, ServiceID: sid}))
	f.Add(conn, madFrame(f, localIP, localIP, 1, &rdmacm.REP{LocalCommID: 0x100001, RemoteCommID: 0x200001}))
	f.Add(conn, madFrame(f, localIP, localIP, 1, &rdmacm.REJ{RemoteCommID: 0x200001}))
	f.Add(conn, madFrame(f, localIP, remoteIP, 1, &rdmacm.DREQ{LocalCommID: 0x100001, RemoteCommID: 0x200001}))
	f.Add([]byte{}, []byte{})
	s := newTestSwitch(f)
	a, _ := s.addClient(f, 1)
	b, bEnd := s.addClient(f, 2)
	if err := s.d.listen(b, sid); err != nil {
		f.Fatal(err)
	}
	// connected: b's queue pair qpn is registered as connected to one of
	// a's at src.
	connected := func(qpn uint32, src *[16]byte) bool {
		b.cn.mu.RLock()
		defer b.cn.mu.RUnlock()
		e, ok := b.cn.m[qpn]
		return ok && e.peer == a && e.gid == *src && e.qpn >= a.first && e.qpn <= a.last
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
	f.Fuzz(func(t *testing.T, ctl, in []byte) {
		if len(in) > 4218 {
			in = in[:4218]
		}
		if len(ctl) > maxRequest {
			ctl = ctl[:maxRequest]
		}
		s.d.control(b, ctl, nil)
		b.cn.mu.RLock()
		for q := range b.cn.m {
			if q < b.first || q > b.last {
				t.Fatalf("b registered qpn %#x, not its own", q)
			}
		}
		b.cn.mu.RUnlock()
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
				ok = ok && h.dqpn >= b.first && h.dqpn <= b.last && !(h.ud && (h.sqpn < a.first || h.sqpn > a.last)) &&
					(h.ud || h.op>>5 == oooOps || connected(h.dqpn, &h.src))
			}
			if !ok {
				t.Fatalf("b got % x from % x", got, in)
			}
		}
		for _, got := range s.wireFrames(t) {
			if !parse(got, &h) || !s.d.isLocal(&h.src) || s.d.isLocal(&h.dst) ||
				h.ud && (h.sqpn < a.first || h.sqpn > a.last) && !(h.sqpn == 1 && fromA(got, &h)) ||
				!bytes.Equal(got[12:], in[12:]) || !bytes.Equal(got[6:12], localMAC[:]) {
				t.Fatalf("sent to the wire % x from % x", got, in)
			}
		}
	})
}

// TestEgressOrder: a client's frames to the wire go into the uplink's
// transmit buffers and leave at the end of its batch; when the uplink has
// no free buffer, the frames the client filled leave at once and the
// frame goes to the egress queue, later frames (any client's) follow it
// there while the queue holds frames, and every frame reaches the wire
// once, each client's in the order sent, counted in wire_tx.
func TestEgressOrder(t *testing.T) {
	s := newTestSwitchOn(t, pipe.Config{MTU: 4200, TxBuffers: 4})
	d := s.d
	a, _ := s.addClient(t, 1)
	b, _ := s.addClient(t, 2)
	out := func(i int) []byte { return frame(t, localIP, remoteIP, 0x70+uint32(i), false, 0) }
	b.wire.want = 1
	d.fromClient(b, out(9)) // b holds one buffer until its batch ends
	a.wire.want = 6
	for i := range 6 {
		d.fromClient(a, out(i)) // 0..2 into the three buffers left, 3..5 queued
	}
	d.fromClient(b, out(10)) // behind a's queued frames
	if d.eg.count != 4 || a.wire.m != 0 {
		t.Fatalf("%d frames queued (want 4), a holds %d buffers", d.eg.count, a.wire.m)
	}
	b.endBatch()                                   // b's first frame leaves: its buffer is free again
	d.eg.drain(d.up.Link, d.st.uplinkTx[:], &d.st) // the uplink's round, before a's batch ends
	got := s.wireFrames(t)
	order := []int{0, 1, 2, 9, 3, 4, 5, 10}
	if len(got) != len(order) {
		t.Fatalf("the wire got %d frames, want %d", len(got), len(order))
	}
	for i, f := range got {
		want := out(order[i])
		copy(want[6:12], localMAC[:])
		if !bytes.Equal(f, want) {
			t.Errorf("frame %d on the wire is not frame %d", i, order[i])
		}
	}
	// The queue is empty again: the next frame goes into a buffer and
	// leaves with the end of the batch.
	d.fromClient(a, out(7))
	if d.eg.count != 0 || a.wire.n != 1 {
		t.Errorf("after the queue drained: %d queued, %d in a's buffers", d.eg.count, a.wire.n)
	}
	if got := s.wireFrames(t); len(got) != 1 || d.st.wireTx.Load() != 9 || d.st.egressFull.Load() != 0 {
		t.Errorf("the wire got %d frames, wire_tx %d, egress waits %d", len(got), d.st.wireTx.Load(), d.st.egressFull.Load())
	}
}
