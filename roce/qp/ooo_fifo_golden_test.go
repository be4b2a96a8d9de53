package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestGoldenOOOHalf builds the half-RDMA/half-FIFO golden captures:
//   - ooo-half-reduce: B's view of two half send writes (A's contexts 0
//     and 1, three packets of uint64s each) arriving interleaved, shuffled
//     and with a duplicate, into B's receive queue; B sums the packets as
//     they arrive and sends the two completions. The sum is the local one
//     and the duplicate consumed no receive;
//   - ooo-half-read: A's view of a half send read (OOO_READ_REQ_TO_FIFO,
//     answered by OOO_FIFO_SEND into A's receive queue) and a half
//     receive read (OOO_READ_REQ_FROM_FIFO into B's receive queue, B's
//     user answering from two pieces with OOO_WRITEs into A's memory), and
//     A's completions of both.
func TestGoldenOOOHalf(t *testing.T) {
	t.Run("reduce", func(t *testing.T) {
		p := newOOOPair(t)
		const words = 384 // 3072 bytes: 3 packets of 1024
		want := make([]uint64, words)
		for s := range 2 {
			for i := range words {
				v := uint64(i+1)*0x0101010101010101 + uint64(s)<<56
				binary.LittleEndian.PutUint64(p.bufA[s*4096+8*i:], v)
				want[i] += v
			}
		}
		for i := range 8 {
			must(t, p.b.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(p.mb, 8192+i*1024, 1024)}}))
		}
		var w [2][][]byte
		for s := range 2 {
			must(t, p.a.q.PostSend(&SendWR{ID: uint64(s), Opcode: WROOOFIFOSend, SGL: []mr.SGE{sge(p.ma, s*4096, 8*words)},
				Ctx: p.ca[s], RemoteCtx: p.cb[s], TID: 1, Notify: wire.NotifyBoth, Tag: 0xADD0 + uint32(s)}))
			if w[s] = sent(p.a, p.now); len(w[s]) != 3 {
				t.Fatalf("%d frames for a 3-packet half send write", len(w[s]))
			}
		}
		c := &capRec{name: "ooo-half-reduce"}
		acc := make([]uint64, words)
		applied, cpls := 0, 0
		for _, f := range [][]byte{w[0][2], w[1][0], w[0][0], w[0][2], w[1][2], w[1][1], w[0][1]} {
			c.add(capture.DirInbound, f)
			out := hand(t, p.b, p.now, f)
			c.add(capture.DirOutbound, out...)
			cpls += len(out)
			for _, wc := range pollAll(p.b.cq) {
				if wc.Opcode != WCOOOFIFO {
					continue
				}
				b := p.bufB[8192+int(wc.ID)*1024:][:wc.ByteLen]
				for k := range len(b) / 8 {
					acc[int(wc.Offset)/8+k] += binary.LittleEndian.Uint64(b[8*k:])
				}
				applied++
			}
		}
		if applied != 6 || cpls != 2 {
			t.Fatalf("%d packets applied (want 6), %d completions (want 2)", applied, cpls)
		}
		for i := range want {
			if acc[i] != want[i] {
				t.Fatalf("element %d: %#x, want %#x", i, acc[i], want[i])
			}
		}
		c.check(t, "veth-b")
	})
	t.Run("read", func(t *testing.T) {
		p := newOOOPair(t)
		fill(p.bufB[:2000], 5)
		fill(p.bufB[30000:31000], 6)
		for i := range 2 {
			must(t, p.a.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(p.ma, 16384+i*1024, 1024)}}))
		}
		must(t, p.b.q.PostRecv(&RecvWR{ID: 77}))
		must(t, p.a.q.PostSend(&SendWR{ID: 5, Opcode: WROOOReadToFIFO, RemoteAddr: p.mb.Addr(), RKey: p.mb.RKey(),
			OpTotal: 2000, Ctx: p.ca[2], RemoteCtx: p.cb[2], TID: 5, Notify: wire.NotifyBoth, Tag: 5}))
		must(t, p.a.q.PostSend(&SendWR{ID: 6, Opcode: WROOOReadFromFIFO, SGL: []mr.SGE{sge(p.ma, 4096, 1500)},
			SinkRKey: p.ma.RKey(), Ctx: p.ca[3], RemoteCtx: p.cb[3], TID: 6, Notify: wire.NotifyBoth, Tag: 6}))
		c := &capRec{name: "ooo-half-read"}
		req := sent(p.a, p.now)
		if len(req) != 2 {
			t.Fatalf("%d request frames", len(req))
		}
		c.add(capture.DirOutbound, req...)
		resp := hand(t, p.b, p.now, req...)
		if len(resp) != 2 {
			t.Fatalf("%d response frames to the half send read, want 2", len(resp))
		}
		var rr WC
		for _, wc := range pollAll(p.b.cq) {
			if wc.Opcode == WCOOOReadRequest {
				rr = wc
			}
		}
		if rr.ID != 77 || rr.Ctx != p.cb[3] || rr.TID != 6 || rr.ByteLen != 1500 {
			t.Fatalf("request completion %+v", rr)
		}
		must(t, p.b.q.PostSend(&SendWR{ID: 8, Opcode: WROOOReadReply, SGL: []mr.SGE{sge(p.mb, 30000, 1000), sge(p.mb, 100, 500)},
			Ctx: rr.Ctx, TID: rr.TID}))
		reply := sent(p.b, p.now)
		if len(reply) != 2 {
			t.Fatalf("%d reply frames, want 2", len(reply))
		}
		c.add(capture.DirInbound, resp...)
		cpl := hand(t, p.a, p.now, resp...)
		c.add(capture.DirOutbound, cpl...)
		c.add(capture.DirInbound, reply...)
		cpl2 := hand(t, p.a, p.now, reply...)
		c.add(capture.DirOutbound, cpl2...)
		if len(cpl) != 1 || len(cpl2) != 1 {
			t.Fatalf("%d and %d completions, want 1 each", len(cpl), len(cpl2))
		}
		got := make([]byte, 2000)
		for _, wc := range pollAll(p.a.cq) {
			if wc.Opcode == WCOOOFIFO {
				copy(got[wc.Offset:], p.bufA[16384+int(wc.ID)*1024:][:wc.ByteLen])
			}
		}
		if !bytes.Equal(got, p.bufB[:2000]) {
			t.Fatal("the half send read's packets put together differ")
		}
		if !bytes.Equal(p.bufA[4096:5096], p.bufB[30000:31000]) || !bytes.Equal(p.bufA[5096:5596], p.bufB[100:600]) {
			t.Fatal("the half receive read's reply differs")
		}
		c.check(t, "veth-a")
	})
}
