package qp

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestGoldenOOOMulticast builds testdata/pcaps/ooo-multicast from what the
// engines send, the sender A's view: a 3-packet WRITE to group context G
// multicast once (DestQPN 0xFFFFFF, 239.1.2.3, 01:00:5e:01:02:03); member B
// places it and acknowledges (an OOO_COMPLETION whose initiator context is
// G) to A's queue pair for B; member C misses packet 1 and stays silent; A
// retries C alone, unicast to C's queue pair with tid 2 on C's G; C places
// and acknowledges. Both members' regions hold the bytes at the offset the
// packets name (their rkeys never travel), and A's queue pairs for B and C
// each get one delivered completion naming G.
func TestGoldenOOOMulticast(t *testing.T) {
	o := defaultOpts()
	o.typ, o.txBufs = OOO, 64
	group := netip.MustParseAddr("239.1.2.3")
	mq := newEnd(t, "A", 0x11, o, 1) // A's multicast queue pair
	pb := newEnd(t, "A", 0x13, o, 1) // A's, connected to B
	pc := newEnd(t, "A", 0x14, o, 1) // A's, connected to C
	b := newEnd(t, "B", 0x12, o, 2)
	c := newEnd(t, "C", 0x12, o, 3)
	connect(t, pb, b, o, 0, 0)
	connect(t, b, pb, o, 0, 0)
	connect(t, pc, c, o, 0, 0)
	connect(t, c, pc, o, 0, 0)
	must(t, mq.q.Modify(&Attr{State: Init, Access: o.access}, AttrState|AttrAccessFlags))
	av := AddressVector{SrcMAC: mq.mac, DstMAC: [6]byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, SrcIP: mq.ip, DstIP: group}
	must(t, mq.q.Modify(&Attr{State: RTR, AV: av, PathMTU: o.mtu, DestQPN: 0xFFFFFF}, AttrState|AttrAV|AttrPathMTU|AttrDestQPN))
	must(t, mq.q.Modify(&Attr{State: RTS}, AttrState))

	g := wire.MakeCtx(GroupCtxFirst+1, 0x5A)
	bufs := map[*end][]byte{}
	for i, m := range []*end{b, c} {
		buf := make([]byte, 8192)
		r, err := m.pd.RegisterIOVA(buf, 0x7f00_3000_0000+uint64(i)<<24, allAcc)
		must(t, err)
		must(t, m.q.DefineGroupContext(g, GroupRegion{Group: group, Addr: r.Addr(), Len: 4096, RKey: r.RKey()}))
		bufs[m] = buf
	}
	src := make([]byte, 2500)
	fill(src, 6)
	post := func(e *end, tid uint32) [][]byte {
		t.Helper()
		m, err := e.pd.RegisterIOVA(bytes.Clone(src), 0x7f00_1000_0000, mr.LocalWrite)
		must(t, err)
		must(t, e.q.PostSend(&SendWR{ID: uint64(tid), Opcode: WROOOWrite, SGL: []mr.SGE{sge(m, 0, len(src))},
			RemoteAddr: 100, RemoteCtx: g, TID: tid, Notify: wire.NotifyInitiator, Tag: 0x6C}))
		return sent(e, 1_000_000)
	}
	rec := &capRec{name: "ooo-multicast"}
	w := post(mq, 1)
	if len(w) != 3 {
		t.Fatalf("%d multicast frames, want 3", len(w))
	}
	rec.add(capture.DirOutbound, w...)
	ackB := hand(t, b, 1_000_000, w...)
	if len(ackB) != 1 {
		t.Fatalf("B sent %d frames, want its acknowledgement", len(ackB))
	}
	rec.add(capture.DirInbound, ackB...)
	hand(t, pb, 1_000_000, ackB...)
	if out := hand(t, c, 1_000_000, w[0], w[2]); len(out) != 0 {
		t.Fatalf("C, missing a packet, sent %d frames", len(out))
	}
	r := post(pc, 2)
	rec.add(capture.DirOutbound, r...)
	ackC := hand(t, c, 1_000_000, r...)
	if len(ackC) != 1 {
		t.Fatalf("C sent %d frames after the retry, want its acknowledgement", len(ackC))
	}
	rec.add(capture.DirInbound, ackC...)
	hand(t, pc, 1_000_000, ackC...)

	var p wire.Packet
	for i, f := range w {
		must(t, p.DecodeWith(f, wire.AcceptOOO))
		if p.BTH.DestQPN != 0xFFFFFF || p.DstIP != group || p.DstMAC != av.DstMAC || p.RETH.VA != uint64(100+i*1024) || p.RETH.RKey != 0 {
			t.Fatalf("multicast frame %d: qpn %#x to %v/%x va %d rkey %#x", i, p.BTH.DestQPN, p.DstIP, p.DstMAC, p.RETH.VA, p.RETH.RKey)
		}
	}
	must(t, p.DecodeWith(r[0], wire.AcceptOOO))
	if p.BTH.DestQPN != c.q.QPN() || p.DstIP != c.ip || p.XRH.TID != 2 || p.XRH.Ctx != g {
		t.Fatalf("retry: qpn %#x to %v tid %d ctx %v", p.BTH.DestQPN, p.DstIP, p.XRH.TID, p.XRH.Ctx)
	}
	for _, m := range []*end{b, c} {
		if !bytes.Equal(bufs[m][100:100+len(src)], src) {
			t.Fatalf("member %s: data differs", m.name)
		}
	}
	for i, e := range []*end{pb, pc} {
		wcs := make([]WC, 4)
		k, _ := e.cq.Poll(wcs)
		if k != 1 || wcs[0].Opcode != WCOOODelivered || wcs[0].Ctx != g || wcs[0].TID != uint32(i+1) || wcs[0].SrcQPN != 0x12 {
			t.Fatalf("A's queue pair %#x: completions %+v", e.q.QPN(), wcs[:k])
		}
	}
	rec.check(t, "veth-a")
}
