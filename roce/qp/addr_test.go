package qp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestIPv6AndVLAN runs RC and UD traffic with IPv6 addresses and an 802.1Q
// tag, and checks the frames and the UD GRH area.
func TestIPv6AndVLAN(t *testing.T) {
	for _, typ := range []Type{RC, UD} {
		t.Run(typ.String(), func(t *testing.T) {
			o := defaultOpts()
			o.typ = typ
			o.noConnect = true
			p := newPair(t, o)
			p.a.ip = netip.MustParseAddr("2001:db8::a")
			p.b.ip = netip.MustParseAddr("2001:db8::b")
			var frames []wire.Packet
			p.tap = func(from *end, f []byte) {
				var pk wire.Packet
				must(t, pk.Decode(f))
				frames = append(frames, pk)
			}
			if typ == RC {
				for _, e := range []*end{p.a, p.b} {
					peer := p.peer(e)
					av := avOf(e, peer)
					av.VLAN = 0x0123
					av.FlowLabel = 0x12345
					must(t, e.q.Modify(&Attr{State: Init, Access: allAcc}, AttrState|AttrAccessFlags))
					must(t, e.q.Modify(&Attr{State: RTR, AV: av, PathMTU: wire.MTU1024, DestQPN: peer.q.QPN(), RQPSN: 7, MaxDestRdAtomic: 4},
						AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
					must(t, e.q.Modify(&Attr{State: RTS, SQPSN: 7, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
						AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxRdAtomic))
				}
			} else {
				p.connect(o)
			}
			am, abuf := p.a.reg(t, 4096, allAcc)
			bm, bbuf := p.b.reg(t, 8192, allAcc)
			fill(abuf, 3)
			if typ == RC {
				must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 3000)},
					RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
				must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRRDMARead, Flags: Signaled, SGL: []mr.SGE{sge(am, 3000, 1000)},
					RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
				w := p.poll(p.a, 2)
				if w[0].Status != WCSuccess || w[1].Status != WCSuccess || !bytes.Equal(bbuf[:3000], abuf[:3000]) ||
					!bytes.Equal(abuf[3000:4000], abuf[:1000]) {
					t.Fatalf("WCs %+v or data differs", w)
				}
				for _, f := range frames {
					if !f.IPv6 || !f.HasVLAN || f.VLANTCI != 0x0123 || f.FlowLabel != 0x12345 || f.TTL != 64 ||
						(f.SrcPort != wire.SourcePortFromFlowLabel(0x12345)) {
						t.Fatalf("frame %v: ipv6 %v vlan %v %#x flow %#x ttl %d sport %d", f.BTH.Opcode, f.IPv6, f.HasVLAN,
							f.VLANTCI, f.FlowLabel, f.TTL, f.SrcPort)
					}
				}
				return
			}
			must(t, p.b.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(bm, 0, 8192)}}))
			av := avOf(p.a, p.b)
			av.TOS = 0x28
			must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 500)}, AH: &av, RemoteQPN: 0x12, RemoteQKey: 0x11111111}))
			w := p.poll(p.b, 1)
			if w[0].Status != WCSuccess || w[0].ByteLen != GRHLen+500 || !w[0].GRH || w[0].SrcQPN != 0x11 {
				t.Fatalf("WC %+v", w[0])
			}
			g := bbuf[:GRHLen]
			a16, b16 := p.a.ip.As16(), p.b.ip.As16()
			if g[0]>>4 != 6 || binary.BigEndian.Uint32(g)>>20&0xFF != 0x28 || binary.BigEndian.Uint16(g[4:]) != 8+12+8+500+4 ||
				g[6] != 17 || g[7] != 64 || !bytes.Equal(g[8:24], a16[:]) || !bytes.Equal(g[24:40], b16[:]) {
				t.Fatalf("GRH % x", g)
			}
			if !bytes.Equal(bbuf[GRHLen:GRHLen+500], abuf[:500]) {
				t.Fatal("payload differs")
			}
			if frames[0].SrcPort != wire.UDSourcePort(0x11) {
				t.Errorf("UD source port %d, want %d", frames[0].SrcPort, wire.UDSourcePort(0x11))
			}
		})
	}
}

// TestUCLoss: a lost packet loses its UC message; the next one arrives.
func TestUCLoss(t *testing.T) {
	o := defaultOpts()
	o.typ = UC
	p := newPair(t, o)
	p.f.drop = dropNth(p.a, wire.UCSendMiddle, 1)
	am, abuf := p.a.reg(t, 8192, allAcc)
	bm, bbuf := p.b.reg(t, 8192, allAcc)
	fill(abuf, 8)
	must(t, p.b.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(bm, 0, 8192)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 3000)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 3, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 4000, 2000)}}))
	p.poll(p.a, 2) // UC completes once sent
	w := p.poll(p.b, 1)
	if w[0].ID != 1 || w[0].ByteLen != 2000 || !bytes.Equal(bbuf[:2000], abuf[4000:6000]) {
		t.Fatalf("receive %+v: the second message should have landed in the first receive WQE", w[0])
	}
	if p.b.cq.Len() != 0 {
		t.Fatal("the broken message completed")
	}
}

// TestUCHalfSequence: a UC message that crosses half the PSN space from the
// initial PSN completes. A UC requester has no acknowledged PSN; when it
// compared its PSN with the initial one as RC compares with the oldest
// unacknowledged PSN, it went back there halfway (2^23 packets on) and
// abandoned the message under way.
func TestUCHalfSequence(t *testing.T) {
	o := defaultOpts()
	o.typ = UC
	o.mtu = wire.MTU256
	p := newPair(t, o)
	const n = 400 * 256 // more packets than one Progress sends
	am, abuf := p.a.reg(t, n, allAcc)
	bm, bbuf := p.b.reg(t, n, allAcc)
	fill(abuf, 4)
	p.step()                                       // the engines take RTS and the initial PSN 0x1000
	p.a.q.req.start(wire.PSNAdd(0x1000, 1<<23-10)) // as after 2^23-10 packets
	must(t, p.b.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(bm, 0, n)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, n)}}))
	if w := p.poll(p.a, 1); w[0].Status != WCSuccess {
		t.Fatalf("send WC %+v", w[0])
	}
	if w := p.poll(p.b, 1); w[0].Status != WCSuccess || w[0].ByteLen != n || !bytes.Equal(bbuf, abuf) {
		t.Fatalf("receive WC %+v, data equal %v", w[0], bytes.Equal(bbuf, abuf))
	}
}
