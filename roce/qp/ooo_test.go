package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// decodeAll decodes OOO frames.
func decodeAll(tb testing.TB, frames [][]byte) []wire.Packet {
	tb.Helper()
	out := make([]wire.Packet, len(frames))
	for i, f := range frames {
		if err := out[i].DecodeWith(f, wire.AcceptOOO); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// TestOOOReceiveNoAlloc: placing OOO_WRITE packets, completing the
// operation (a target completion and a completion packet), taking that
// completion at the initiator and sending new WRITEs allocate nothing, once
// the contexts have been used.
func TestOOOReceiveNoAlloc(t *testing.T) {
	p := newOOOPair(t)
	wr := &SendWR{ID: 1, Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, 0, 4000)}, RemoteAddr: p.mb.Addr(),
		RKey: p.mb.RKey(), Ctx: p.ca[0], RemoteCtx: p.cb[0], TID: 1, Notify: wire.NotifyBoth}
	must(t, p.a.q.PostSend(wr))
	pkts := decodeAll(t, sent(p.a, p.now))
	if len(pkts) != 4 {
		t.Fatalf("%d packets", len(pkts))
	}
	wcs := make([]WC, 16)
	tid := uint32(1)
	var cpl wire.Packet
	run := func() {
		tid++
		for _, i := range [...]int{3, 1, 1, 0, 2} {
			pkts[i].XRH.TID = tid
			p.b.q.Receive(&pkts[i], p.now, p.b.out)
		}
		if len(p.b.out.committed) != 1 {
			t.Fatalf("%d completion frames", len(p.b.out.committed))
		}
		if err := cpl.DecodeWith(p.b.out.committed[0], wire.AcceptOOO); err != nil {
			t.Fatal(err)
		}
		p.b.out.committed = p.b.out.committed[:0]
		p.b.out.free = len(p.b.out.pool)
		// The initiator: a new WRITE goes out (its tid set in the context),
		// then the completion of the one placed arrives with that tid.
		wr.TID = tid
		if err := p.a.q.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		p.a.q.Progress(p.now, p.a.out)
		p.a.out.committed = p.a.out.committed[:0]
		p.a.out.free = len(p.a.out.pool)
		p.a.q.Receive(&cpl, p.now, p.a.out)
		if n, _ := p.b.cq.Poll(wcs); n != 1 || wcs[0].TID != tid {
			t.Fatalf("target completions %+v", wcs[:n])
		}
		if n, _ := p.a.cq.Poll(wcs); n != 1 || wcs[0].Opcode != WCOOODelivered || wcs[0].TID != tid {
			t.Fatalf("initiator completions %+v", wcs[:n])
		}
	}
	run()
	if n := testing.AllocsPerRun(200, run); n != 0 {
		t.Errorf("%.1f allocations per operation", n)
	}
	if s := p.b.q.Stats(); s.Get(CtrDupIndex) == 0 || s.Get(CtrOOOCompletionsSent) == 0 {
		t.Errorf("dup_index %d, completions sent %d", s.Get(CtrDupIndex), s.Get(CtrOOOCompletionsSent))
	}
}

// TestOOOPaths: Paths n spreads the packets of a WRITE over n UDP source
// ports, base + index mod n; READ responses and completions use the base.
func TestOOOPaths(t *testing.T) {
	p := newOOOPair(t)
	must(t, p.a.q.PostSend(&SendWR{Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, 0, 7000)}, RemoteAddr: p.mb.Addr(),
		RKey: p.mb.RKey(), RemoteCtx: p.cb[0], TID: 1, Paths: 3}))
	pkts := decodeAll(t, sent(p.a, p.now))
	base := wire.SourcePort(p.a.q.QPN(), p.b.q.QPN())
	if len(pkts) != 7 {
		t.Fatalf("%d packets", len(pkts))
	}
	for i := range pkts {
		if want := spreadPort(base, uint32(i%3)); pkts[i].SrcPort != want {
			t.Errorf("packet %d from port %#x, want %#x", i, pkts[i].SrcPort, want)
		}
	}
	if spreadPort(0xFFFF, 2) != 0xC001 || spreadPort(0x1000, 2) != 0x1002 {
		t.Errorf("spreadPort wraps to %#x, %#x", spreadPort(0xFFFF, 2), spreadPort(0x1000, 2))
	}
}

// FuzzOOOReceive feeds hostile OOO packets (any context, key, tid, total,
// segment, index, place, rkey and notify that the wire accepts) to an OOO
// queue pair: nothing panics, the queue pair stays in RTS, a region without
// remote write access and the memory around the writable one never change,
// and every byte that changes in the writable region lies where a packet
// said it goes.
func FuzzOOOReceive(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0x10, 2, 0, 0, 0, 1, 0, 3, 0, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{1, 1, 1, 0, 0x30, 1, 1, 0, 4, 0, 2, 1, 0, 9, 1, 1}, 6))
	f.Add(bytes.Repeat([]byte{2, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 3, 0, 0x08, 1, 3, 0, 8, 0, 2, 2, 0, 1, 0, 0}, 4))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := newOOOPair(t)
		must(t, p.b.q.AdmitSink(avOf(p.b, p.a), p.a.q.QPN()))
		// The writable region sits in the middle of an arena; a read-only
		// region beside it.
		arena := make([]byte, 3<<12)
		rw, err := p.b.pd.RegisterIOVA(arena[4096:8192], 0x10000, allAcc)
		must(t, err)
		ro, err := p.b.pd.RegisterIOVA(arena[8192:], 0x20000, mr.LocalWrite|mr.RemoteRead)
		must(t, err)
		fill(arena, 5)
		before := bytes.Clone(arena)
		claimed := make([]bool, len(arena)) // bytes some packet said it writes
		keys := []uint32{rw.RKey(), ro.RKey(), p.mb.RKey(), 0xdead}
		buf := make([]byte, 4300)
		var pkt wire.Packet
		for len(data) >= 16 {
			r := data[:16]
			data = data[16:]
			op := []wire.Opcode{wire.OOOWrite, wire.OOOReadReq, wire.OOOCompletion, wire.OOO3PWrite, wire.OOO3PReadReq}[r[0]%5]
			ctx := p.cb[r[1]%4]
			if r[1]&0x80 != 0 {
				ctx = wire.MakeCtx(uint32(r[1]&0x7F), r[2])
			} else if r[2]&1 != 0 {
				ctx = wire.MakeCtx(ctx.ID(), ctx.Key()+r[2])
			}
			seg := wire.MTU(1 + r[5]%3)
			total := uint32(binary.BigEndian.Uint16(r[3:])) % 5000
			idx := uint32(r[6] % 24)
			off := uint64(idx) * uint64(seg.Bytes())
			n := uint64(0)
			if off < uint64(total) {
				n = min(uint64(seg.Bytes()), uint64(total)-off)
			}
			va := 0x10000 + uint64(binary.BigEndian.Uint16(r[7:])%0x3000) - 0x800
			q := wire.Packet{SrcIP: p.a.ip, DstIP: p.b.ip, TTL: 64, SrcPort: 0xC000, DstPort: wire.UDPPort,
				BTH: wire.BTH{Opcode: op, PKey: 0xFFFF, DestQPN: p.b.q.QPN(), PSN: idx},
				XRH: wire.XRH{Ctx: ctx, TID: uint32(r[9] % 6), Total: total, Initiator: p.ca[r[10]%4],
					Notify: wire.Notify(r[11] % 4), Seg: seg, Tag: uint32(r[12])}}
			key := keys[r[13]%4]
			switch op {
			case wire.OOOWrite, wire.OOO3PWrite:
				q.Payload = make([]byte, n)
				for i := range q.Payload {
					q.Payload[i] = r[14] ^ byte(i)
				}
				q.RETH = wire.RETH{VA: va, RKey: key, DMALen: uint32(n)}
				if op == wire.OOO3PWrite { // from the connected controller, or not (r[15] bit 0)
					q.XTPController = wire.XTP{GID: p.a.ip.As16(), QPN: p.a.q.QPN() ^ uint32(r[15]&1), Ctx: p.ca[0]}
				}
				for i := va; i < va+n; i++ {
					if i >= 0x10000-4096 && i < 0x10000+8192 {
						claimed[i-(0x10000-4096)] = true
					}
				}
			case wire.OOOReadReq, wire.OOO3PReadReq:
				q.RETH = wire.RETH{VA: va, RKey: key, DMALen: total}
				q.XRR = wire.XRR{VA: uint64(r[15]) << 8, RKey: keys[r[15]%4]}
				if op == wire.OOO3PReadReq { // A is an admitted sink; r[14] picks another QPN
					q.XTPTarget = wire.XTP{GID: p.a.ip.As16(), QPN: p.a.q.QPN() + uint32(r[14]%2), Ctx: p.ca[r[14]%4]}
					q.XTPController = wire.XTP{GID: p.a.ip.As16(), QPN: p.a.q.QPN(), Ctx: p.ca[1]}
				}
			case wire.OOOCompletion:
				q.XCS = wire.XCS{Status: r[15] % 2}
			}
			fl, err := q.Encode(buf)
			if err != nil {
				continue // the wire refuses it: it never reaches a queue pair
			}
			if err := pkt.DecodeWith(buf[:fl], wire.AcceptOOO); err != nil {
				t.Fatalf("encoded but does not decode: %v", err)
			}
			p.b.q.Receive(&pkt, p.now, p.b.out)
			sent(p.b, p.now)
			for k := 0; k < 4 && p.b.q.Progress(p.now, p.b.out) != 0; k++ {
				takeCommitted(p.b)
			}
			takeCommitted(p.b)
		}
		if !bytes.Equal(arena[:4096], before[:4096]) || !bytes.Equal(arena[8192:], before[8192:]) {
			t.Fatal("memory outside the writable region changed")
		}
		for i := 4096; i < 8192; i++ {
			if arena[i] != before[i] && !claimed[i] {
				t.Fatalf("byte %#x of the writable region changed, no packet placed it there", 0x10000+i-4096)
			}
		}
		if st := p.b.q.State(); st != RTS {
			t.Fatalf("queue pair in %v", st)
		}
	})
}
