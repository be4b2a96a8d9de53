package daemon

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

// grantVA is where b's region starts in its rkey's addresses (grant tests).
const grantVA = 0x7f0000000000

const rw = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead

// grantFixture is placeFixture with b's region registered under rkey 0x55
// (PD 7, rw access, addressed from grantVA) and b's QP 0x2001 granted to
// a's 0x1001 through one indicated WRITE at PSN 100 answered with a grant.
func grantFixture(t *testing.T) *placeFixture {
	x := newPlaceFixture(t)
	if err := x.s.d.addKey(x.b, 1, 0x55, 7, rw, grantVA, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	x.grantAt(t, req(place.OpWrite, 0, 4096), 100, 3)
	return x
}

// grantAt has a send m (PSN psn) as an indicated request, b answer it
// placing it at its region's start with a grant (MSN msn), and checks
// that a got the ACK.
func (x *placeFixture) grantAt(t *testing.T, m *place.Msg, psn, msn uint32) {
	t.Helper()
	d := x.s.d
	m.PSN = psn
	d.fromClient(x.a, encodePlace(m))
	ind := placeMsgs(t, x.bE)
	if len(ind) != 1 || ind[0].Kind != place.KindInd {
		t.Fatalf("b got %+v, want an indication", ind)
	}
	ans := &place.Msg{Kind: place.KindAns, Tag: ind[0].Tag, SrcQPN: 0x1001, DstQPN: 0x2001, Status: place.Place,
		Flags: place.FlagGrant, Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), PSN: psn, MSN: msn,
		RKey: 7, Imm: uint32(rw), NSegs: 1}
	ans.SegsBuf[0] = place.Seg{Region: 1, Len: m.Len}
	d.fromClient(x.b, encodePlace(ans))
	if got := placeMsgs(t, x.aE); len(got) != 1 || got[0].Kind != place.KindAck || got[0].PSN != psn {
		t.Fatalf("a got %+v, want the ACK of %d", got, psn)
	}
}

// firstHop sends a's request m and reports whether the daemon placed it
// itself: b got a Note (else it must have got an indication) and a the
// ACK of m's last PSN with MSN msn.
func (x *placeFixture) firstHop(t *testing.T, m *place.Msg, msn uint32) bool {
	t.Helper()
	x.s.d.fromClient(x.a, encodePlace(m))
	b, a := placeMsgs(t, x.bE), placeMsgs(t, x.aE)
	if len(b) == 1 && b[0].Kind == place.KindInd && len(a) == 0 {
		return false
	}
	last := wire.PSNAdd(m.PSN, m.NPkts-1)
	if len(b) != 1 || b[0].Kind != place.KindNote || b[0].PSN != m.PSN || b[0].NPkts != m.NPkts || b[0].Len != m.Len ||
		len(a) != 1 || a[0].Kind != place.KindAck || a[0].Status != place.AETH || a[0].PSN != last || a[0].MSN != msn ||
		(wire.AETH{Syndrome: a[0].Syndrome}).Type() != wire.SyndromeACK {
		t.Fatalf("b got %+v, a got %+v; want a Note and the ACK of %d (MSN %d)", b, a, last, msn)
	}
	return true
}

// writeAt is a's WRITE of n bytes from its region at off to b's rkey
// 0x55 at b's region offset boff, at PSN psn.
func writeAt(op place.Op, off uint64, n uint32, boff uint64, psn uint32) *place.Msg {
	m := req(op, off, n)
	m.RKey, m.VA, m.PSN = 0x55, grantVA+boff, psn
	return m
}

// TestPlacementGrant: once b's answer grants its queue pair, the daemon
// places a's WRITEs and READs at the PSN b expects itself (b gets a Note,
// a the ACK, the bytes land), and hands everything it must not decide to
// b as an indication: a PSN out of order, an rkey it does not hold, a range past the rkey's, another PD, an access the rkey
// or the queue pair does not give, a SEND. Revocation (b's request, b's
// region deregistered) stops it before it returns, and a grant in an
// answer to a request indicated before the revocation is refused.
func TestPlacementGrant(t *testing.T) {
	x := grantFixture(t)
	d := x.s.d
	if !x.firstHop(t, writeAt(place.OpWrite, 8192, 8192, 16<<10, 101), 4) {
		t.Fatal("a granted WRITE was indicated")
	}
	if !bytes.Equal(x.bm[16<<10:24<<10], x.am[8192:16384]) {
		t.Error("WRITE on the grant: b's region does not hold a's bytes")
	}
	copy(x.bm[40<<10:], bytes.Repeat([]byte("granted!"), 512))
	rd := writeAt(place.OpRead, 20<<10, 4096, 40<<10, 102)
	rd.NPkts = 2
	if !x.firstHop(t, rd, 5) {
		t.Fatal("a granted READ was indicated")
	}
	if !bytes.Equal(x.am[20<<10:24<<10], x.bm[40<<10:44<<10]) {
		t.Error("READ on the grant: a's region does not hold b's bytes")
	}
	if st := d.Stats(); st.PlaceGranted != 2 || st.Placed != 3 || st.PlaceBad != 0 {
		t.Errorf("stats %+v", st)
	}
	psn, msn := uint32(104), uint32(6)
	// Each of these goes to b (the indication clears the grant), which
	// grants again by answering a WRITE.
	w := func(psn uint32) *place.Msg { return writeAt(place.OpWrite, 0, 4096, 0, psn) }
	for _, tc := range []struct {
		what string
		m    func(psn uint32) *place.Msg
		fix  func()
	}{
		{"a PSN ahead", func(psn uint32) *place.Msg { return w(psn + 1) }, nil},
		{"a PSN behind", func(psn uint32) *place.Msg { return w(psn - 1) }, nil},
		{"an unknown rkey", func(psn uint32) *place.Msg { m := w(psn); m.RKey = 0x56; return m }, nil},
		{"past the rkey's range", func(psn uint32) *place.Msg { return writeAt(place.OpWrite, 0, 4096, 62<<10, psn) }, nil},
		{"below the rkey's range", func(psn uint32) *place.Msg { m := w(psn); m.VA = grantVA - 1; return m }, nil},
		{"a range wrapping around", func(psn uint32) *place.Msg { m := w(psn); m.VA = 1<<64 - 2048; return m }, nil},
		{"a SEND", func(psn uint32) *place.Msg { return writeAt(place.OpSend, 0, 4096, 0, psn) }, nil},
		{"another PD", w, func() { d.addKey(x.b, 1, 0x55, 8, rw, grantVA, 0, 64<<10) }},
		{"an rkey without remote write", w, func() { d.addKey(x.b, 1, 0x55, 7, mr.LocalWrite|mr.RemoteRead, grantVA, 0, 64<<10) }},
		{"a queue pair without remote read", func(psn uint32) *place.Msg { return writeAt(place.OpRead, 0, 4096, 0, psn) },
			func() { x.b.grants[0x2001].access = mr.RemoteWrite }},
		{"b revoked", w, func() {
			if err := d.revoke(x.b, 0x2001); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		if tc.fix != nil {
			tc.fix()
		}
		before := x.bm[0]
		if x.firstHop(t, tc.m(psn), msn) {
			t.Fatalf("%s: placed by the daemon", tc.what)
		}
		x.cIntact(t)
		if x.bm[0] != before {
			t.Fatalf("%s: b's memory changed", tc.what)
		}
		d.addKey(x.b, 1, 0x55, 7, rw, grantVA, 0, 64<<10)
		x.grantAt(t, w(psn), psn, msn)
		if !x.firstHop(t, w(psn+1), msn+1) {
			t.Fatalf("%s: not granted again", tc.what)
		}
		psn, msn = psn+2, msn+2
	}

	// A grant answering a request indicated before b revoked is refused.
	d.fromClient(x.a, encodePlace(writeAt(place.OpSend, 0, 4096, 0, psn)))
	ind := placeMsgs(t, x.bE)
	if err := d.revoke(x.b, 0x2001); err != nil {
		t.Fatal(err)
	}
	ans := &place.Msg{Kind: place.KindAns, Tag: ind[0].Tag, SrcQPN: 0x1001, DstQPN: 0x2001, Status: place.Place,
		Flags: place.FlagGrant, Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), PSN: psn, MSN: msn,
		RKey: 7, Imm: uint32(rw), NSegs: 1}
	ans.SegsBuf[0] = place.Seg{Region: 1, Len: 4096}
	d.fromClient(x.b, encodePlace(ans))
	placeMsgs(t, x.aE)
	if x.firstHop(t, writeAt(place.OpWrite, 0, 4096, 0, psn+1), msn+1) {
		t.Fatal("a grant sent before the revocation was taken")
	}
	// b's engine revokes on its port too; a QPN not b's is refused.
	x.grantAt(t, writeAt(place.OpWrite, 0, 4096, 0, psn+2), psn+2, msn)
	d.fromClient(x.b, encodePlace(&place.Msg{Kind: place.KindRevoke, DstQPN: 0x2001}))
	if x.firstHop(t, writeAt(place.OpWrite, 0, 4096, 0, psn+3), msn+1) {
		t.Fatal("placed after b's engine revoked")
	}
	before := d.Stats().PlaceBad
	d.fromClient(x.b, encodePlace(&place.Msg{Kind: place.KindRevoke, DstQPN: 0x1001}))
	if d.Stats().PlaceBad != before+1 {
		t.Error("b revoking a's queue pair was not refused")
	}
	// Deregistering the region drops its rkey: nothing placed after it.
	x.grantAt(t, writeAt(place.OpWrite, 0, 4096, 0, psn+4), psn+4, msn)
	if err := d.dropRegion(x.b, 1); err != nil {
		t.Fatal(err)
	}
	if x.firstHop(t, writeAt(place.OpWrite, 0, 4096, 0, psn+5), msn+1) {
		t.Fatal("placed into a deregistered region")
	}
	if len(x.b.mem.keys) != 0 {
		t.Errorf("keys left after the region went: %v", x.b.mem.keys)
	}
}

// TestPlacementGrantPeerGone: a grant names its requester's QPN; when the
// requester's client goes, the grant goes with it (another client may get
// those QPNs).
func TestPlacementGrantPeerGone(t *testing.T) {
	x := grantFixture(t)
	x.s.d.clients[x.b.id] = x.b // the test switch's clients are not listed
	x.s.d.revokePeers(x.a)
	if x.firstHop(t, writeAt(place.OpWrite, 0, 4096, 0, 101), 4) {
		t.Fatal("placed on the grant of a requester that went")
	}
}

// TestPlacementGrantFullPort: a granted WRITE whose Note finds b's port
// full is dropped whole: nothing copied, no ACK (a resends it).
func TestPlacementGrantFullPort(t *testing.T) {
	x := grantFixture(t)
	d := x.s.d
	var filler [place.HeaderLen]byte
	place.Encode(filler[:], &place.Msg{Kind: place.KindDone, DstQPN: 0x2001})
	for x.b.deliverQueued(filler[:], nil) {
	}
	clear(x.bm[:8192])
	d.fromClient(x.a, encodePlace(writeAt(place.OpWrite, 0, 8192, 0, 101)))
	if got := placeMsgs(t, x.aE); len(got) != 0 {
		t.Errorf("a got %+v", got)
	}
	if !bytes.Equal(x.bm[:8192], make([]byte, 8192)) {
		t.Error("copied without a Note")
	}
	for _, m := range placeMsgs(t, x.bE) {
		if m.Kind != place.KindDone {
			t.Fatalf("b got %+v", m)
		}
	}
	if !x.firstHop(t, writeAt(place.OpWrite, 0, 8192, 0, 101), 4) {
		t.Error("the resent WRITE was not placed")
	}
}

// FuzzPlaceKey: whatever rkeys a client registers (any region, range,
// PD, access, address) and whatever grant its answer carries, a's
// requests on them copy only into b's own region within the rkey's
// range, never into c's (a zero-length one nowhere), and nothing panics or
// loops.
func FuzzPlaceKey(f *testing.F) {
	f.Add(uint32(1), uint32(0x55), uint32(7), uint32(rw), uint64(grantVA), uint64(0), uint64(64<<10), uint64(grantVA), uint32(4096), uint8(1))
	f.Add(uint32(1), uint32(0x55), uint32(7), uint32(rw), uint64(1<<64-4096), uint64(60<<10), uint64(4096), uint64(1<<64-100), uint32(100), uint8(5))
	f.Add(uint32(2), uint32(0), uint32(0), uint32(0), uint64(0), uint64(0), uint64(0), uint64(0), uint32(0), uint8(1))
	f.Add(uint32(1), uint32(9), uint32(7), uint32(1<<31|7), uint64(5), uint64(1<<63), uint64(1<<63), uint64(5), uint32(1<<20), uint8(1))
	x := newPlaceFixture(f)
	d := x.s.d
	psn := uint32(100)
	f.Fuzz(func(t *testing.T, region, rkey, pd, access uint32, va, off, n, reqVA uint64, reqLen uint32, op uint8) {
		clear(x.b.mem.keys)
		clear(x.c.mem.keys)
		err := d.addKey(x.b, region, rkey, pd, mr.Access(access), va, off, n)
		if err == nil && (region != 1 || n == 0 || off+n > 64<<10 || off+n < off || va+n-1 < va) {
			t.Fatalf("registered region %d [%d, +%d) at %#x", region, off, n, va)
		}
		d.addKey(x.c, 1, rkey, pd, rw, va, 0, 64<<10) // c's: never granted
		if reqLen > 64<<10 {
			reqLen %= 64 << 10
		}
		x.grantAt(t, req(place.OpWrite, 0, 4096), psn, 1)
		x.b.grants[0x2001].pd, x.b.grants[0x2001].access = pd, mr.Access(access)
		bm := bytes.Clone(x.bm)
		m := req(place.Op(op%5+1), 0, reqLen)
		m.RKey, m.VA, m.PSN = rkey, reqVA, psn+1
		psn += 2
		if reqLen == 0 {
			m.NSegs = 0
		}
		placed := x.firstHop(t, m, 2)
		x.cIntact(t)
		if !placed {
			return
		}
		if reqLen == 0 { // as on the wire, a zero-length WRITE or READ names no memory
			if !bytes.Equal(bm, x.bm) || (m.Op != place.OpWrite && m.Op != place.OpRead) {
				t.Fatalf("zero-length %+v changed b's memory or was not a WRITE/READ", m)
			}
			return
		}
		k := x.b.mem.keys[rkey]
		start := k.off + (reqVA - k.va)
		if err != nil || k.pd != pd || (m.Op != place.OpWrite && m.Op != place.OpRead) || reqVA < k.va ||
			start+uint64(reqLen) > k.off+k.n {
			t.Fatalf("placed %+v on key %+v (registration: %v)", m, k, err)
		}
		if m.Op == place.OpWrite {
			for i := range bm {
				if (uint64(i) < start || uint64(i) >= start+uint64(reqLen)) && bm[i] != x.bm[i] {
					t.Fatalf("b's byte %d changed outside [%d, +%d)", i, start, reqLen)
				}
			}
		}
	})
}

// grantKnown reports whether the daemon holds a grant for qpn.
func grantKnown(d *Daemon, qpn uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.clients {
		c.grMu.Lock()
		g := c.grants[qpn]
		known := g != nil && g.known
		c.grMu.Unlock()
		if known {
			return true
		}
	}
	return false
}

// keysOf counts the rkeys the daemon holds for the client owning qpn.
func keysOf(d *Daemon, qpn uint32) int {
	c := d.owner(qpn)
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	return len(c.mem.keys)
}

// TestPrivilegedPlacementRevoke: between two daemon clients, AllocMR
// registers the region's rkey and a WRITE grants the responder's queue
// pair (the next WRITE is placed on the first hop, byte-exact); a Modify
// that leaves RTS has revoked the grant when it returns, and so has
// Destroy, and Deregister has dropped the rkey when it returns. A queue
// pair its engine fails (an atomic frame with a bad rkey: class C)
// revokes its grant through its port.
func TestPrivilegedPlacementRevoke(t *testing.T) {
	netlab.Privileged(t)
	const size = 64 << 10
	x, y, d := daemonClients(t)
	for _, how := range []string{"modify", "destroy", "engine"} {
		sa, sb := newScriptSideMR(t, x, size, true), newScriptSideMR(t, y, size, true)
		if err := sa.qp.Connect(1, endpoint(t, y, sb.qp, 2), nil); err != nil {
			t.Fatal(err)
		}
		if err := sb.qp.Connect(2, endpoint(t, x, sa.qp, 1), nil); err != nil {
			t.Fatal(err)
		}
		if keysOf(d, sb.qp.QPN()) == 0 {
			t.Fatal("AllocMR registered no rkey with the daemon")
		}
		g0 := d.Stats().PlaceGranted
		for i := range 2 {
			for j := range sa.buf {
				sa.buf[j] = byte(i*31 + j)
			}
			if err := sa.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
				SGL:        []roce.SGE{{Addr: sa.mr.Addr(), Length: size, LKey: sa.mr.LKey()}},
				RemoteAddr: sb.mr.Addr(), RKey: sb.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := sa.wait(t, 1); wc[0].Status != roce.WCSuccess.String() {
				t.Fatalf("WRITE %d: %+v", i, wc[0])
			}
			if !bytes.Equal(sb.buf, sa.buf) {
				t.Fatalf("WRITE %d: not landed", i)
			}
		}
		if g := d.Stats().PlaceGranted - g0; g != 1 || !grantKnown(d, sb.qp.QPN()) {
			t.Fatalf("%d of the second WRITE placed on the first hop; grant held: %v", g, grantKnown(d, sb.qp.QPN()))
		}
		switch how {
		case "modify":
			if err := sb.qp.Modify(&roce.Attr{State: roce.StateError}, roce.AttrState); err != nil {
				t.Fatal(err)
			}
		case "destroy":
			if err := sb.qp.Destroy(); err != nil {
				t.Fatal(err)
			}
		case "engine":
			if err := sa.qp.PostSend(roce.SendWR{ID: 9, Opcode: roce.WRAtomicFetchAdd, Flags: roce.Signaled,
				SGL:        []roce.SGE{{Addr: sa.mr.Addr(), Length: 8, LKey: sa.mr.LKey()}},
				RemoteAddr: sb.mr.Addr(), RKey: sb.mr.RKey() + 1, CompareAdd: 1}); err != nil {
				t.Fatal(err)
			}
			if wc := sa.wait(t, 1); wc[0].Status == roce.WCSuccess.String() {
				t.Fatalf("an atomic with a bad rkey: %+v", wc[0])
			}
			// The NAK and then the revocation left b's engine in one round;
			// the daemon reads them in order: wait for it (bounded).
			for i := 0; grantKnown(d, sb.qp.QPN()) && i < 10000; i++ {
				time.Sleep(time.Millisecond)
			}
		}
		if grantKnown(d, sb.qp.QPN()) {
			t.Fatalf("%s returned with the grant held", how)
		}
		n := keysOf(d, sb.qp.QPN())
		if err := sb.mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		if got := keysOf(d, sb.qp.QPN()); got != n-1 {
			t.Fatalf("Deregister returned with %d rkeys held, %d before", got, n)
		}
	}
}
