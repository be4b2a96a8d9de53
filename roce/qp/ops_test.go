package qp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

var allMTUs = []wire.MTU{wire.MTU256, wire.MTU512, wire.MTU1024, wire.MTU2048, wire.MTU4096}

// sizesFor returns message sizes around the packet boundaries of pmtu.
func sizesFor(pmtu int) []int {
	return []int{0, 1, pmtu - 1, pmtu, pmtu + 1, 2 * pmtu, 3*pmtu + 5, 17*pmtu + 3}
}

// splitSGL covers n bytes at off of m with up to three SGEs.
func splitSGL(m *mr.MR, off, n int) []mr.SGE {
	if n < 3 {
		return []mr.SGE{sge(m, off, n)}
	}
	a, b := n/3, n/2
	return []mr.SGE{sge(m, off, a), sge(m, off+a, b-a), sge(m, off+b, n-b)}
}

func TestEveryOperationEveryMTU(t *testing.T) {
	for _, mtu := range allMTUs {
		pm := mtu.Bytes()
		t.Run(mtu.String(), func(t *testing.T) {
			o := defaultOpts()
			o.mtu = mtu
			p := newPair(t, o)
			if testing.Verbose() {
				p.tap = func(from *end, f []byte) {
					var pk wire.Packet
					err := pk.Decode(f)
					t.Logf("%s: %v psn %x ack %v aeth %v reth %+v len %d err %v", from.name, pk.BTH.Opcode, pk.BTH.PSN, pk.BTH.AckReq, pk.AETH, pk.RETH, len(pk.Payload), err)
				}
			}
			const size = 1 << 20
			am, abuf := p.a.reg(t, size, allAcc)
			bm, bbuf := p.b.reg(t, size, allAcc)
			id := uint64(100)
			for _, n := range sizesFor(pm) {
				for _, op := range []WROpcode{WRSend, WRSendImm, WRRDMAWrite, WRRDMAWriteImm, WRRDMARead, WRSendInv} {
					id++
					name := fmt.Sprintf("%v/%d", op, n)
					fill(abuf[:n], byte(id))
					fill(bbuf[:n], byte(id+50))
					clear(abuf[size/2 : size/2+n])
					clear(bbuf[size/2 : size/2+n])
					wr := &SendWR{ID: id, Opcode: op, Flags: Signaled, SGL: splitSGL(am, 0, n), Imm: 0xA0B0C000 + uint32(n),
						RemoteAddr: bm.Addr() + size/2, RKey: bm.RKey()}
					var spare *mr.MR
					if op == WRSendInv {
						spare, _ = p.b.reg(t, 64, allAcc|mr.RemoteInvalidate)
						wr.InvRKey = spare.RKey()
					}
					if op == WRRDMARead {
						wr.SGL = splitSGL(am, size/2, n)
						wr.RemoteAddr = bm.Addr()
					}
					recv := op == WRSend || op == WRSendImm || op == WRRDMAWriteImm || op == WRSendInv
					if recv {
						must(t, p.b.q.PostRecv(&RecvWR{ID: id + 1000, SGL: splitSGL(bm, size/2, n+10)}))
					}
					must(t, p.a.q.PostSend(wr))
					wa := p.poll(p.a, 1)
					want := WC{ID: id, Status: WCSuccess, Opcode: op.wcOpcode(), ByteLen: uint32(n), QPN: 0x11}
					if d := cmp.Diff([]WC{want}, wa); d != "" {
						t.Fatalf("%s: send WC (-want +got):\n%s", name, d)
					}
					if recv {
						wb := p.poll(p.b, 1)
						want := WC{ID: id + 1000, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(n), QPN: 0x12, SrcQPN: 0x11}
						switch op {
						case WRSendImm:
							want.ImmData, want.WithImm = wr.Imm, true
						case WRRDMAWriteImm:
							want.ImmData, want.WithImm, want.Opcode = wr.Imm, true, WCRecvRDMAWithImm
						case WRSendInv:
							want.ImmData, want.WithInv = wr.InvRKey, true
						}
						if d := cmp.Diff([]WC{want}, wb); d != "" {
							t.Fatalf("%s: recv WC (-want +got):\n%s", name, d)
						}
					}
					if op == WRRDMARead {
						if !bytes.Equal(abuf[size/2:size/2+n], bbuf[:n]) {
							t.Fatalf("%s: READ data differs", name)
						}
					} else if !bytes.Equal(bbuf[size/2:size/2+n], abuf[:n]) {
						t.Fatalf("%s: data differs", name)
					}
					if spare != nil {
						if _, err := p.b.tbl.Remote(p.b.pd, nil, spare.RKey(), spare.Addr(), 1, mr.RemoteWrite); err == nil {
							t.Fatalf("%s: rkey still valid after SEND_WITH_INV", name)
						}
					}
				}
			}
			if n := p.a.q.Stats().Get(CtrRetransmits); n != 0 {
				t.Errorf("%d retransmits on a perfect network", n)
			}
		})
	}
}

func TestAtomics(t *testing.T) {
	p := newPair(t, defaultOpts())
	am, abuf := p.a.reg(t, 64, allAcc)
	bm, bbuf := p.b.reg(t, 64, allAcc)
	binary.NativeEndian.PutUint64(bbuf[8:], 1000)
	post := func(id uint64, op WROpcode, cmpAdd, swap uint64) {
		must(t, p.a.q.PostSend(&SendWR{ID: id, Opcode: op, Flags: Signaled, SGL: []mr.SGE{sge(am, int(id%8)*8, 8)},
			RemoteAddr: bm.Addr() + 8, RKey: bm.RKey(), CompareAdd: cmpAdd, Swap: swap}))
	}
	post(1, WRAtomicFetchAdd, 5, 0)     // 1000 -> 1005, returns 1000
	post(2, WRAtomicCmpSwp, 999, 7)     // no match: stays 1005, returns 1005
	post(3, WRAtomicCmpSwp, 1005, 4242) // match: -> 4242, returns 1005
	post(4, WRAtomicFetchAdd, 1<<63, 0) // -> 4242 + 2^63, returns 4242
	wcs := p.poll(p.a, 4)
	for i, wc := range wcs {
		op := WCFetchAdd
		if i == 1 || i == 2 {
			op = WCCompSwap
		}
		if d := cmp.Diff(WC{ID: uint64(i + 1), Opcode: op, ByteLen: 8, QPN: 0x11}, wc); d != "" {
			t.Errorf("WC %d (-want +got):\n%s", i, d)
		}
	}
	for i, want := range []uint64{1000, 1005, 1005, 4242} {
		if got := binary.NativeEndian.Uint64(abuf[(i+1)*8:]); got != want {
			t.Errorf("atomic %d returned %d, want %d", i+1, got, want)
		}
	}
	if got := binary.NativeEndian.Uint64(bbuf[8:]); got != 4242+1<<63 {
		t.Errorf("target = %d, want %d", got, uint64(4242+1<<63))
	}
}

func TestInlineAndUnsignaled(t *testing.T) {
	p := newPair(t, defaultOpts())
	am, abuf := p.a.reg(t, 64, mr.LocalWrite)
	bm, bbuf := p.b.reg(t, 256, allAcc)
	copy(abuf, "inline payload, copied at post")
	must(t, p.b.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(bm, 0, 256)}}))
	must(t, p.b.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(bm, 128, 128)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 10, Opcode: WRSend, Flags: Inline, SGL: []mr.SGE{sge(am, 0, 30)}}))
	copy(abuf, "OVERWRITTEN AFTER POST........") // inline data was copied already
	must(t, p.a.q.PostSend(&SendWR{ID: 11, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 5)}}))
	wa := p.poll(p.a, 1)
	if len(wa) != 1 || wa[0].ID != 11 {
		t.Fatalf("send WCs = %+v, want only the signaled one (11)", wa)
	}
	p.poll(p.b, 2)
	if string(bbuf[:30]) != "inline payload, copied at post" {
		t.Fatalf("inline data = %q", bbuf[:30])
	}
	if string(bbuf[128:133]) != "OVERW" {
		t.Fatalf("second send = %q", bbuf[128:133])
	}
	if err := p.a.q.PostSend(&SendWR{ID: 12, Opcode: WRSend, Flags: Inline, SGL: []mr.SGE{sge(am, 0, 64), sge(am, 0, 1)}}); err == nil {
		t.Fatal("inline post over MaxInline accepted")
	}
}

func TestUD(t *testing.T) {
	o := defaultOpts()
	o.typ = UD
	p := newPair(t, o)
	am, abuf := p.a.reg(t, 2048, allAcc)
	bm, bbuf := p.b.reg(t, 4096, allAcc)
	fill(abuf, 9)
	must(t, p.b.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(bm, 0, 2048)}}))
	must(t, p.b.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(bm, 2048, 2048)}}))
	av := avOf(p.a, p.b)
	// Wrong Q_Key: dropped silently, no completion at B.
	must(t, p.a.q.PostSend(&SendWR{ID: 5, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 10)}, AH: &av, RemoteQPN: 0x12, RemoteQKey: 0x1234}))
	// High bit: the QP's own Q_Key (0x11111111, same on both sides).
	must(t, p.a.q.PostSend(&SendWR{ID: 6, Opcode: WRSendImm, Imm: 0xfeed, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 1000)}, AH: &av, RemoteQPN: 0x12, RemoteQKey: 0x80000000}))
	wa := p.poll(p.a, 2)
	if wa[0].Status != WCSuccess || wa[1].Status != WCSuccess {
		t.Fatalf("UD send WCs %+v", wa)
	}
	wb := p.poll(p.b, 1)
	want := WC{ID: 1, Opcode: WCRecv, ByteLen: GRHLen + 1000, ImmData: 0xfeed, WithImm: true, GRH: true, QPN: 0x12, SrcQPN: 0x11}
	if d := cmp.Diff([]WC{want}, wb); d != "" {
		t.Fatalf("UD recv WC (-want +got):\n%s", d)
	}
	if !bytes.Equal(bbuf[GRHLen:GRHLen+1000], abuf[:1000]) {
		t.Fatal("UD payload differs")
	}
	grh := bbuf[:GRHLen]
	if !bytes.Equal(grh[:20], make([]byte, 20)) || grh[20] != 0x45 || grh[29] != 17 ||
		!bytes.Equal(grh[32:36], []byte{198, 51, 100, 1}) || !bytes.Equal(grh[36:40], []byte{198, 51, 100, 2}) ||
		wire.IPv4Checksum(grh[20:40]) != 0 {
		t.Fatalf("GRH area = % x", grh)
	}
	if got, want := binary.BigEndian.Uint16(grh[22:]), uint16(20+8+12+8+4+1000+4); got != want {
		t.Errorf("GRH IPv4 total length %d, want %d", got, want)
	}
	if n := p.b.cq.Len(); n != 0 {
		t.Fatalf("%d more completions at B (the wrong Q_Key datagram?)", n)
	}
	// Too big for the path MTU: refused at post.
	if err := p.a.q.PostSend(&SendWR{ID: 7, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 2048)}, AH: &av, RemoteQPN: 0x12}); err == nil {
		t.Fatal("UD send over the MTU accepted")
	}
	// RDMA on UD: refused.
	if err := p.a.q.PostSend(&SendWR{ID: 8, Opcode: WRRDMAWrite, SGL: []mr.SGE{sge(am, 0, 8)}, AH: &av, RemoteQPN: 0x12}); err == nil {
		t.Fatal("UD RDMA WRITE accepted")
	}
}

func TestUC(t *testing.T) {
	o := defaultOpts()
	o.typ = UC
	o.mtu = wire.MTU256
	p := newPair(t, o)
	am, abuf := p.a.reg(t, 4096, allAcc)
	bm, bbuf := p.b.reg(t, 8192, allAcc)
	fill(abuf, 1)
	must(t, p.b.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(bm, 0, 4096)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 1000)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 3, Opcode: WRRDMAWriteImm, Imm: 5, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 3000)},
		RemoteAddr: bm.Addr() + 4096, RKey: bm.RKey()}))
	must(t, p.b.q.PostRecv(&RecvWR{ID: 4}))
	p.poll(p.a, 2)
	wb := p.poll(p.b, 2)
	if wb[0].ByteLen != 1000 || wb[1].Opcode != WCRecvRDMAWithImm || wb[1].ByteLen != 3000 {
		t.Fatalf("UC recv WCs %+v", wb)
	}
	if !bytes.Equal(bbuf[:1000], abuf[:1000]) || !bytes.Equal(bbuf[4096:7096], abuf[:3000]) {
		t.Fatal("UC data differs")
	}
	if err := p.a.q.PostSend(&SendWR{ID: 5, Opcode: WRRDMARead, SGL: []mr.SGE{sge(am, 0, 8)}}); err == nil {
		t.Fatal("UC READ accepted")
	}
}
