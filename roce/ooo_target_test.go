package roce_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// oooTarget is an OOO queue pair on a device behind a pipe whose other end
// the test drives by hand: it builds an initiator's frames itself (in any
// order, duplicated, stale, hostile) and reads what the device sends back.
type oooTarget struct {
	tb       testing.TB
	raw      *pipe.Link
	dev      *roce.Device
	qp       *roce.QP
	scq, rcq *roce.CQ
	buf      []byte
	mr       *roce.MR
	ctx      []roce.Ctx
	sent     uint64 // frames injected
	bufs     [][]byte
}

const oooPeerQPN = 0x77

// oooPeerCtx is the hand-driven initiator's context: where completions go.
var oooPeerCtx = roce.MakeCtx(0x42, 9)

func newOOOTarget(tb testing.TB, seed uint64, nctx int) *oooTarget {
	tb.Helper()
	return newOOOTargetQPN(tb, seed, nctx, 0)
}

// newOOOTargetQPN is newOOOTarget with the queue pair at QPN qpn (0: the
// first free).
func newOOOTargetQPN(tb testing.TB, seed uint64, nctx int, qpn uint32) *oooTarget {
	tb.Helper()
	la, lb, err := pipe.New(pipe.Config{MTU: 4200, Depth: 4096})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close() })
	dev, err := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{addrB}, ContextSeed: seed, OOOContexts: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	t := &oooTarget{tb: tb, raw: la, dev: dev, buf: make([]byte, 1<<20), bufs: make([][]byte, 256)}
	pd := dev.AllocPD()
	if t.scq, err = dev.CreateCQ(1 << 16); err != nil {
		tb.Fatal(err)
	}
	if t.rcq, err = dev.CreateCQ(1 << 16); err != nil {
		tb.Fatal(err)
	}
	if t.mr, err = pd.RegMR(t.buf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead); err != nil {
		tb.Fatal(err)
	}
	if t.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.OOO, SendCQ: t.scq, RecvCQ: t.rcq, QPN: qpn}); err != nil {
		tb.Fatal(err)
	}
	if err := t.qp.Connect(0, roce.Endpoint{QPN: oooPeerQPN, GID: roce.GIDFromIP(addrA)}, nil); err != nil {
		tb.Fatal(err)
	}
	if t.ctx, err = t.qp.AcquireContexts(nctx); err != nil {
		tb.Fatal(err)
	}
	return t
}

// oooOp is an operation as the hand-driven initiator sends it.
type oooOp struct {
	op     wire.Opcode // OOOWrite (default) or OOOReadReq
	ctx    roce.Ctx    // the target's context
	tid    uint32
	va     uint64 // the target's VA of byte 0 (READ: the source)
	rkey   uint32
	notify roce.Notify
	tag    uint32
	seg    roce.MTU
	data   []byte // WRITE: the operation's bytes
	total  uint32 // READ: the length
	sinkVA uint64 // READ: the initiator's buffer
}

func (o *oooOp) packets() uint32 {
	x := wire.XRH{Total: uint32(len(o.data)), Seg: o.seg}
	return x.Packets()
}

// frame encodes packet idx of o (a READ request for OOOReadReq).
func (t *oooTarget) frame(o *oooOp, idx uint32) []byte {
	t.tb.Helper()
	p := wire.Packet{SrcIP: addrA, DstIP: addrB, TTL: 64, SrcPort: 0xC000, DstPort: wire.UDPPort,
		BTH: wire.BTH{Opcode: wire.OOOWrite, PKey: 0xFFFF, DestQPN: t.qp.QPN(), PSN: idx},
		XRH: wire.XRH{Ctx: o.ctx, TID: o.tid, Total: uint32(len(o.data)), Initiator: oooPeerCtx,
			Notify: o.notify, Seg: o.seg, Tag: o.tag}}
	if o.op == wire.OOOReadReq {
		p.BTH.Opcode, p.BTH.PSN = wire.OOOReadReq, 0
		p.XRH.Total = o.total
		p.RETH = wire.RETH{VA: o.va, RKey: o.rkey, DMALen: o.total}
		p.XRR = wire.XRR{VA: o.sinkVA, RKey: 0x5151}
	} else {
		off := p.XRH.Offset(idx)
		n := min(uint64(o.seg.Bytes()), uint64(len(o.data))-off)
		p.Payload = o.data[off : off+n]
		p.RETH = wire.RETH{VA: o.va + off, RKey: o.rkey, DMALen: uint32(n)}
	}
	b := make([]byte, 4300)
	n, err := p.Encode(b)
	if err != nil {
		t.tb.Fatalf("encode %v idx %d: %v", o.op, idx, err)
	}
	return b[:n]
}

// frames returns the frames of o's packets in the order idxs gives.
func (t *oooTarget) frames(o *oooOp, idxs ...uint32) [][]byte {
	out := make([][]byte, len(idxs))
	for i, idx := range idxs {
		out[i] = t.frame(o, idx)
	}
	return out
}

// inject hands frames to the device, 256 at a time, and returns once it
// has processed them (and sent what they caused).
func (t *oooTarget) inject(frames [][]byte) {
	t.tb.Helper()
	for len(frames) > 0 {
		k := min(len(frames), len(t.bufs))
		n := t.raw.Alloc(t.bufs[:k])
		if n == 0 {
			t.tb.Fatal("no transmit buffer on the raw end")
		}
		for i := range n {
			t.bufs[i] = t.bufs[i][:copy(t.bufs[i], frames[i])]
		}
		if err := t.raw.Send(t.bufs[:n]); err != nil {
			t.tb.Fatal(err)
		}
		frames = frames[n:]
		t.sent += uint64(n)
		deadline := time.Now().Add(10 * time.Second)
		for t.dev.Stats().RxFrames < t.sent {
			if time.Now().After(deadline) {
				t.tb.Fatalf("the device received %d of %d frames", t.dev.Stats().RxFrames, t.sent)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// replies returns the packets the device sent since the last call.
func (t *oooTarget) replies() []wire.Packet {
	t.tb.Helper()
	var out []wire.Packet
	rx := make([][]byte, 64)
	for {
		n, err := t.raw.Receive(rx)
		if err != nil {
			t.tb.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for _, f := range rx[:n] {
			var p wire.Packet
			if err := p.DecodeWith(f, wire.AcceptOOO); err != nil {
				t.tb.Fatalf("the device sent a frame that does not decode: %v", err)
			}
			p.Payload = append([]byte(nil), p.Payload...)
			out = append(out, p)
		}
	}
}

// wcs returns the completions waiting on cq.
func wcs(tb testing.TB, cq *roce.CQ) []roce.WC {
	tb.Helper()
	var out []roce.WC
	buf := make([]roce.WC, 64)
	for {
		n, err := cq.Poll(buf)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out
		}
	}
}

// completions returns the OOO_COMPLETION packets among ps, by tid.
func completions(tb testing.TB, ps []wire.Packet) map[uint32]int {
	tb.Helper()
	m := map[uint32]int{}
	for i := range ps {
		p := &ps[i]
		if p.BTH.Opcode != wire.OOOCompletion {
			tb.Errorf("unexpected %v from the target", p.BTH.Opcode)
			continue
		}
		if p.XRH.Ctx != oooPeerCtx || p.BTH.DestQPN != oooPeerQPN || p.XCS.Status != wire.XCSSuccess {
			tb.Errorf("completion to %v qpn %#x status %d", p.XRH.Ctx, p.BTH.DestQPN, p.XCS.Status)
		}
		m[p.XRH.TID]++
	}
	return m
}
