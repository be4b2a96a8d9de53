package qp

import (
	"bytes"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestMaxRdAtomicAndFence: no more READ/atomic requests are outstanding
// than max_rd_atomic, and a fenced WR waits for the earlier ones.
func TestMaxRdAtomicAndFence(t *testing.T) {
	o := defaultOpts()
	o.rdAtomic = 2
	p := newPair(t, o)
	am, _ := p.a.reg(t, 1<<16, allAcc)
	bm, _ := p.b.reg(t, 1<<16, allAcc)
	outstanding, most := 0, 0
	var order []wire.Opcode
	p.tap = func(from *end, f []byte) {
		var pk wire.Packet
		must(t, pk.Decode(f))
		switch pk.BTH.Opcode {
		case wire.RCReadRequest, wire.RCFetchAdd:
			outstanding++
			most = max(most, outstanding)
		case wire.RCReadResponseLast, wire.RCReadResponseOnly, wire.RCAtomicAck:
			outstanding--
		}
		if from == p.a {
			order = append(order, pk.BTH.Opcode)
		}
	}
	for i := range 6 {
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMARead, SGL: []mr.SGE{sge(am, i*4096, 4096)},
			RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	}
	must(t, p.a.q.PostSend(&SendWR{ID: 6, Opcode: WRAtomicFetchAdd, SGL: []mr.SGE{sge(am, 60000, 8)},
		RemoteAddr: bm.Addr() + 64, RKey: bm.RKey(), CompareAdd: 1}))
	must(t, p.a.q.PostSend(&SendWR{ID: 7, Opcode: WRRDMAWrite, Flags: Signaled | Fence, SGL: []mr.SGE{sge(am, 0, 100)},
		RemoteAddr: bm.Addr() + 1000, RKey: bm.RKey()}))
	if w := p.poll(p.a, 1); w[0].ID != 7 || w[0].Status != WCSuccess {
		t.Fatalf("WC %+v", w)
	}
	if most != 2 {
		t.Errorf("at most %d READ/atomic requests outstanding, want max_rd_atomic = 2", most)
	}
	// The fenced WRITE went out after the last READ/atomic was answered.
	if order[len(order)-1] != wire.RCWriteOnly || outstanding != 0 {
		t.Errorf("send order %v (outstanding %d): the fenced WRITE did not wait", order, outstanding)
	}
}

// TestLargeMessages: one 32 MiB WRITE and READ (64 MiB with -long), split into
// thousands of packets, land byte for byte.
func TestLargeMessages(t *testing.T) {
	size := 32 << 20
	if *long {
		size = 64 << 20
	}
	o := defaultOpts()
	o.mtu = wire.MTU4096
	p := newPair(t, o)
	am, abuf := p.a.reg(t, size, allAcc)
	bm, bbuf := p.b.reg(t, size, allAcc)
	fill(abuf, 11)
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, size)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	if w := p.poll(p.a, 1); w[0].Status != WCSuccess || w[0].ByteLen != uint32(size) {
		t.Fatalf("WRITE WC %+v", w)
	}
	if !bytes.Equal(abuf, bbuf) {
		t.Fatal("WRITE data differs")
	}
	fill(bbuf, 99)
	must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRRDMARead, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, size)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	if w := p.poll(p.a, 1); w[0].Status != WCSuccess || w[0].ByteLen != uint32(size) {
		t.Fatalf("READ WC %+v", w)
	}
	if !bytes.Equal(abuf, bbuf) {
		t.Fatal("READ data differs")
	}
}

// TestUDReceiveLimits: a datagram without a receive WQE is lost (UD has no
// RNR); one larger than the receive buffer completes it with LOC_LEN_ERR.
func TestUDReceiveLimits(t *testing.T) {
	o := defaultOpts()
	o.typ = UD
	p := newPair(t, o)
	am, _ := p.a.reg(t, 1024, allAcc)
	bm, _ := p.b.reg(t, 4096, allAcc)
	av := avOf(p.a, p.b)
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 100)}, AH: &av, RemoteQPN: 0x12, RemoteQKey: 0x11111111}))
	p.run(nil, 100)
	if p.b.cq.Len() != 0 || p.b.q.Stats().Get(CtrDropped) != 1 {
		t.Fatalf("datagram without receive WQE: %d completions, %d dropped", p.b.cq.Len(), p.b.q.Stats().Get(CtrDropped))
	}
	must(t, p.b.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(bm, 0, GRHLen+50)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 3, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 100)}, AH: &av, RemoteQPN: 0x12, RemoteQKey: 0x11111111}))
	w := p.poll(p.b, 1)
	if w[0].ID != 2 || w[0].Status != WCLocLenErr {
		t.Fatalf("WC %+v, want LOC_LEN_ERR", w[0])
	}
	if p.b.q.State() != RTS {
		t.Fatalf("UD QP state %v after a length error", p.b.q.State())
	}
}
