package roce_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// TestOOOGroupWrite: a WRITE to a group context, multicast (DestQPN
// 0xFFFFFF, a group's MAC and address) over a pipe that reorders and
// duplicates: the member's device routes it to the queue pair that defined
// the context, which places it at the region's offset (no rkey), gives its
// user the target completion and acknowledges to the sender's queue pair
// connected to it (a delivered completion naming the group context and the
// member's QPN). A unicast retry with tid+1 on the member's context lands
// too; a frame for another group address, or a stale tid, places nothing.
func TestOOOGroupWrite(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{MTU: 1500, Seed: 3,
		AtoB: pipe.Faults{Reorder: 0.3, Duplicate: 0.05}, BtoA: pipe.Faults{Reorder: 0.3, Duplicate: 0.05}})
	group := netip.MustParseAddr("239.1.2.3")
	x, y, _, _ := connectOOO(t, p, connCfg{}, 1) // x: the sender's queue pair for member y
	m := newSide(t, p.a, roce.OOO, connCfg{}, 0) // the sender's multicast queue pair
	if err := m.qp.Connect(0, roce.Endpoint{QPN: roce.MulticastQPN, GID: roce.GIDFromIP(group)}, nil); err != nil {
		t.Fatal(err)
	}
	g := roce.MakeCtx(roce.GroupCtxFirst+5, 0x42)
	reg := roce.GroupRegion{Group: group, Addr: y.mr.Addr() + 4096, Len: 200_000, RKey: y.mr.RKey()}
	if err := y.qp.DefineGroupContext(g, reg); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.DefineGroupContext(g, reg); err == nil {
		t.Error("a group context defined twice")
	}
	if err := y.qp.DefineGroupContext(roce.MakeCtx(7, 1), reg); err == nil {
		t.Error("a pool id accepted as a group context")
	}
	const n, off = 150_000, 1000
	fill(m.buf[:n], 9)
	post := func(s *side, tid uint32) {
		t.Helper()
		if err := s.qp.PostSend(roce.SendWR{ID: uint64(tid), Opcode: roce.WROOOWrite, Flags: roce.Signaled,
			SGL: []roce.SGE{s.sge(0, n)}, RemoteAddr: off, RemoteCtx: g, TID: tid, Notify: roce.NotifyBoth, Tag: 7}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, s.scq); wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOOWrite {
			t.Fatalf("local completion %+v", wc)
		}
	}
	post(m, 1)
	wc := waitWC(t, y.rcq)
	if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOOTarget || wc.Ctx != g || wc.TID != 1 || wc.ByteLen != n {
		t.Fatalf("target completion %+v", wc)
	}
	if !bytes.Equal(y.buf[4096+off:4096+off+n], m.buf[:n]) {
		t.Fatal("group WRITE data differs")
	}
	wc = waitWC(t, x.scq)
	if wc.Opcode != roce.WCOOODelivered || wc.Ctx != g || wc.TID != 1 || wc.Tag != 7 || wc.SrcQPN != y.qp.QPN() || wc.ByteLen != n {
		t.Fatalf("member's acknowledgement %+v", wc)
	}

	// The unicast retry: tid 2 on the member's context, from x.
	fill(x.buf[:n], 11)
	post(x, 2)
	if wc := waitWC(t, y.rcq); wc.Opcode != roce.WCOOOTarget || wc.TID != 2 {
		t.Fatalf("retry's target completion %+v", wc)
	}
	if !bytes.Equal(y.buf[4096+off:4096+off+n], x.buf[:n]) {
		t.Fatal("retried data differs")
	}
	for {
		wc = waitWC(t, x.scq)
		if wc.TID == 2 {
			break
		}
	}
	if wc.Opcode != roce.WCOOODelivered || wc.Ctx != g || wc.SrcQPN != y.qp.QPN() {
		t.Fatalf("retry's acknowledgement %+v", wc)
	}

	// Another group address with the same context: no queue pair takes it.
	other := newSide(t, p.a, roce.OOO, connCfg{}, 0)
	if err := other.qp.Connect(0, roce.Endpoint{QPN: roce.MulticastQPN, GID: roce.GIDFromIP(netip.MustParseAddr("239.9.9.9"))}, nil); err != nil {
		t.Fatal(err)
	}
	before := p.b.Stats().DropUnknownQPN
	fill(other.buf[:n], 99)
	post(other, 3)
	// A stale tid on the right group places nothing either.
	fill(m.buf[:n], 77)
	post(m, 1)
	noWC(t, y.rcq, 100*time.Millisecond)
	if !bytes.Equal(y.buf[4096+off:4096+off+n], x.buf[:n]) {
		t.Fatal("a non-member's frame or a stale tid changed the member's memory")
	}
	if d := p.b.Stats().DropUnknownQPN - before; d < uint64((n+1023)/1024) {
		t.Errorf("drop_unknown_qpn rose by %d for another group's frames", d)
	}
	if err := y.qp.RemoveGroupContext(g); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.RemoveGroupContext(g); err == nil {
		t.Error("a group context removed twice")
	}
}

// TestUDMulticast: a UD queue pair attached to a multicast GID (as
// ibv_attach_mcast) receives SENDs to MulticastQPN at that group; after
// DetachMcast it receives none and the frames are counted dropped.
func TestUDMulticast(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	const qkey = 0x55
	x := newSide(t, p.a, roce.UD, connCfg{}, 0)
	y := newSide(t, p.b, roce.UD, connCfg{}, 0)
	z := newSide(t, p.b, roce.UD, connCfg{}, 0)
	for _, s := range []*side{x, y, z} {
		if err := s.qp.Activate(qkey, 0x100); err != nil {
			t.Fatal(err)
		}
	}
	group := roce.GIDFromIP(netip.MustParseAddr("239.4.5.6"))
	for _, s := range []*side{y, z} {
		if err := s.qp.AttachMcast(group); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{s.sge(0, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := y.qp.AttachMcast(group); err == nil {
		t.Error("attached twice")
	}
	if err := x.qp.AttachMcast(roce.GIDFromIP(netip.MustParseAddr("198.51.100.1"))); err == nil {
		t.Error("attached to a unicast address")
	}
	ah, err := p.a.CreateAH(group, roce.MulticastQPN, qkey)
	if err != nil {
		t.Fatal(err)
	}
	if want := [6]byte{0x01, 0x00, 0x5e, 0x04, 0x05, 0x06}; ah.AV.DstMAC != want {
		t.Errorf("group MAC %x, want %x", ah.AV.DstMAC, want)
	}
	fill(x.buf[:300], 4)
	send := func() {
		t.Helper()
		if err := x.qp.PostSendAH(roce.SendWR{Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 300)}}, ah); err != nil {
			t.Fatal(err)
		}
		waitWC(t, x.scq)
	}
	send()
	for _, s := range []*side{y, z} {
		if wc := waitWC(t, s.rcq); wc.Status != roce.WCSuccess || wc.ByteLen != 340 || wc.SrcQPN != x.qp.QPN() {
			t.Fatalf("receive completion %+v", wc)
		}
		if !bytes.Equal(s.buf[40:340], x.buf[:300]) {
			t.Fatal("multicast payload differs")
		}
	}
	for _, s := range []*side{y, z} {
		if err := s.qp.DetachMcast(group); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.PostRecv(roce.RecvWR{ID: 2, SGL: []roce.SGE{s.sge(0, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := y.qp.DetachMcast(group); err == nil {
		t.Error("detached twice")
	}
	before := p.b.Stats().DropUnknownQPN
	send()
	noWC(t, y.rcq, 50*time.Millisecond)
	noWC(t, z.rcq, 0)
	if d := p.b.Stats().DropUnknownQPN - before; d != 1 {
		t.Errorf("drop_unknown_qpn rose by %d after detach, want 1", d)
	}
}

// TestOOOGroupBroadcast: a group WRITE to the subnet broadcast address
// (ff:ff:ff:ff:ff:ff, given as ConnectOptions.DstMAC: a subnet's broadcast
// address is not resolved) places at the member that bound its group
// context to that address, and is acknowledged like a multicast one.
func TestOOOGroupBroadcast(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	bcast := netip.MustParseAddr("198.51.100.255")
	x, y, _, _ := connectOOO(t, p, connCfg{}, 1)
	m := newSide(t, p.a, roce.OOO, connCfg{}, 0)
	if err := m.qp.Connect(0, roce.Endpoint{QPN: roce.MulticastQPN, GID: roce.GIDFromIP(bcast)},
		&roce.ConnectOptions{DstMAC: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}); err != nil {
		t.Fatal(err)
	}
	g := roce.MakeCtx(roce.GroupCtxLast, 1)
	if err := y.qp.DefineGroupContext(g, roce.GroupRegion{Group: bcast, Addr: y.mr.Addr(), Len: 5000, RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	fill(m.buf[:5000], 21)
	if err := m.qp.PostSend(roce.SendWR{Opcode: roce.WROOOWrite, SGL: []roce.SGE{m.sge(0, 5000)},
		RemoteCtx: g, TID: 1, Notify: roce.NotifyInitiator}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Opcode != roce.WCOOODelivered || wc.Ctx != g || wc.SrcQPN != y.qp.QPN() {
		t.Fatalf("acknowledgement %+v", wc)
	}
	if !bytes.Equal(y.buf[:5000], m.buf[:5000]) {
		t.Fatal("broadcast WRITE data differs")
	}
	// Beyond the region: a protection error at the member, no acknowledgement.
	if err := m.qp.PostSend(roce.SendWR{Opcode: roce.WROOOWrite, SGL: []roce.SGE{m.sge(0, 100)}, RemoteAddr: 4950,
		RemoteCtx: g, TID: 2, Notify: roce.NotifyBoth}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, y.rcq); wc.Status != roce.WCRemAccessErr || wc.Ctx != g || wc.TID != 2 {
		t.Fatalf("member's completion %+v, want a protection error", wc)
	}
	noWC(t, x.scq, 50*time.Millisecond)
}
