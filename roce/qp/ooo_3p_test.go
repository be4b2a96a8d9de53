package qp

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// trio is a third-party setup: the controller C (its OOO queue pair
// connected to S), the source S and the sink T (both connected to C's
// queue pair: C is the controller they admit), S admitting T as a sink.
// Keys, contexts and IOVAs are fixed: the golden captures hold them.
type trio struct {
	c, s, t    *end
	ms, mt     *mr.MR
	bufS, bufT []byte
	cc, cs, ct []wire.Ctx
	now        int64
}

func newTrio(tb testing.TB) *trio {
	tb.Helper()
	o := defaultOpts()
	o.typ, o.txBufs = OOO, 64
	r := &trio{c: newEnd(tb, "C", 0x11, o, 1), s: newEnd(tb, "S", 0x12, o, 2), t: newEnd(tb, "T", 0x13, o, 3), now: 1_000_000}
	connect(tb, r.c, r.s, o, 0, 0)
	connect(tb, r.s, r.c, o, 0, 0)
	connect(tb, r.t, r.c, o, 0, 0)
	must(tb, r.s.q.AdmitSink(avOf(r.s, r.t), r.t.q.QPN()))
	r.bufS, r.bufT = make([]byte, 64<<10), make([]byte, 64<<10)
	var err error
	if r.ms, err = r.s.pd.RegisterIOVA(r.bufS, 0x7f00_2000_0000, allAcc); err != nil {
		tb.Fatal(err)
	}
	if r.mt, err = r.t.pd.RegisterIOVA(r.bufT, 0x7f00_3000_0000, allAcc); err != nil {
		tb.Fatal(err)
	}
	for _, x := range []struct {
		e   *end
		out *[]wire.Ctx
	}{{r.c, &r.cc}, {r.s, &r.cs}, {r.t, &r.ct}} {
		if *x.out, err = x.e.q.AcquireContexts(4); err != nil {
			tb.Fatal(err)
		}
	}
	return r
}

// wr is C's third-party READ of n bytes of S's buffer at off to T's at
// toff, on context slot i of each side.
func (r *trio) wr(i int, tid uint32, off, toff uint64, n uint32) *SendWR {
	return &SendWR{ID: uint64(100 + i), Opcode: WROOO3PRead, Flags: Signaled, RemoteAddr: r.ms.Addr() + off,
		RKey: r.ms.RKey(), Ctx: r.cc[i], RemoteCtx: r.cs[i], TID: tid, Notify: wire.NotifyInitiator, Tag: 0x3B000000 + tid,
		Sink: ThirdParty{GID: r.t.ip, QPN: r.t.q.QPN(), Ctx: r.ct[i], VA: r.mt.Addr() + toff, RKey: r.mt.RKey(), Len: n}}
}

// TestOOO3P: a third-party READ moves S's bytes to T exactly; T's
// completion goes to C (C's delivered completion), S gets none and sends
// nothing but the data; the frames are OOO_3P_WRITE addressed to T's queue
// pair and MAC.
func TestOOO3P(t *testing.T) {
	r := newTrio(t)
	fill(r.bufS[:10000], 5)
	must(t, r.c.q.PostSend(r.wr(0, 1, 0, 512, 10000)))
	req := sent(r.c, r.now)
	if len(req) != 1 {
		t.Fatalf("%d request frames", len(req))
	}
	data := hand(t, r.s, r.now, req...)
	if len(data) != 10 { // ⌈10000 / 1024⌉
		t.Fatalf("%d data frames from S, want 10", len(data))
	}
	for _, p := range decodeAll(t, data) {
		if p.BTH.Opcode != wire.OOO3PWrite || p.BTH.DestQPN != r.t.q.QPN() || p.DstMAC != r.t.mac || p.DstIP != r.t.ip ||
			p.XTPController.QPN != r.c.q.QPN() || p.XRH.Ctx != r.ct[0] {
			t.Fatalf("S sent %v to %v qpn %#x ctx %v controller qpn %#x", p.BTH.Opcode, p.DstIP, p.BTH.DestQPN, p.XRH.Ctx, p.XTPController.QPN)
		}
	}
	// Reversed order: placement does not depend on it.
	for i, j := 0, len(data)-1; i < j; i, j = i+1, j-1 {
		data[i], data[j] = data[j], data[i]
	}
	cpl := hand(t, r.t, r.now, data...)
	if len(cpl) != 1 {
		t.Fatalf("%d completion frames from T", len(cpl))
	}
	if !bytes.Equal(r.bufT[512:10512], r.bufS[:10000]) || r.bufT[511] != 0 || r.bufT[10512] != 0 {
		t.Fatal("T's memory differs from S's bytes")
	}
	cp := decodeAll(t, cpl)[0]
	if cp.BTH.Opcode != wire.OOOCompletion || cp.BTH.DestQPN != r.c.q.QPN() || cp.DstIP != r.c.ip || cp.XRH.Ctx != r.cc[0] {
		t.Fatalf("T's completion went to %v qpn %#x ctx %v", cp.DstIP, cp.BTH.DestQPN, cp.XRH.Ctx)
	}
	if back := hand(t, r.c, r.now, cpl...); len(back) != 0 {
		t.Fatalf("C answered the completion with %d frames", len(back))
	}
	wcs := make([]WC, 8)
	if k, _ := r.c.cq.Poll(wcs); k != 2 || wcs[0].Opcode != WCOOORead || wcs[1].Opcode != WCOOODelivered ||
		wcs[1].TID != 1 || wcs[1].ByteLen != 10000 || wcs[1].Tag != 0x3B000001 || wcs[1].ID != 100 {
		t.Fatalf("C's completions %+v", wcs[:k])
	}
	if k, _ := r.s.cq.Poll(wcs); k != 0 {
		t.Fatalf("S's completions %+v", wcs[:k])
	}
	if k, _ := r.t.cq.Poll(wcs); k != 0 {
		t.Fatalf("T's completions (notify initiator only) %+v", wcs[:k])
	}
	if st := r.s.q.Stats(); st.Get(CtrOOOCompletionsRecv) != 0 || st.Get(CtrOOO3PRefused) != 0 {
		t.Fatalf("S: completions received %d, refused %d", st.Get(CtrOOOCompletionsRecv), st.Get(CtrOOO3PRefused))
	}
	if n := r.t.q.Stats().Get(CtrOOOCompletionsSent); n != 1 {
		t.Fatalf("T sent %d completions", n)
	}
}

// TestOOO3PRefused: S acts only for the controller it is connected to and
// only towards admitted sinks; T only for its controller; a bad context key
// is a stale context. Nothing is sent, nothing placed.
func TestOOO3PRefused(t *testing.T) {
	r := newTrio(t)
	fill(r.bufS[:4096], 6)
	must(t, r.c.q.PostSend(r.wr(1, 1, 0, 0, 4096)))
	req := sent(r.c, r.now)[0]
	edit := func(f func(p *wire.Packet)) []byte {
		var p wire.Packet
		must(t, p.DecodeWith(bytes.Clone(req), wire.AcceptOOO))
		f(&p)
		b := make([]byte, frameSize)
		n, err := p.Encode(b)
		must(t, err)
		return b[:n]
	}
	// Another controller: another QPN in the XTP, or another address.
	other := edit(func(p *wire.Packet) { p.XTPController.QPN = 0x77 })
	otherIP := edit(func(p *wire.Packet) { p.SrcIP = r.t.ip })
	// A sink S has not admitted.
	unadmitted := edit(func(p *wire.Packet) { p.XTPTarget.QPN = 0x66 })
	// S's context with a wrong key.
	badKey := edit(func(p *wire.Packet) { p.XRH.Ctx = wire.MakeCtx(p.XRH.Ctx.ID(), p.XRH.Ctx.Key()+1) })
	for name, f := range map[string][]byte{"other controller": other, "other address": otherIP,
		"unadmitted sink": unadmitted, "bad key": badKey} {
		if out := hand(t, r.s, r.now, f); len(out) != 0 {
			t.Fatalf("%s: S sent %d frames", name, len(out))
		}
	}
	st := r.s.q.Stats()
	if st.Get(CtrOOO3PRefused) != 3 || st.Get(CtrStaleCtx) != 1 {
		t.Fatalf("S: refused %d, stale_ctx %d", st.Get(CtrOOO3PRefused), st.Get(CtrStaleCtx))
	}
	// A revoked sink is refused too.
	r.s.q.RevokeSink(r.t.ip, r.t.q.QPN())
	if out := hand(t, r.s, r.now, req); len(out) != 0 || r.s.q.Stats().Get(CtrOOO3PRefused) != 4 {
		t.Fatalf("revoked sink: %d frames", len(out))
	}
	must(t, r.s.q.AdmitSink(avOf(r.s, r.t), r.t.q.QPN()))
	data := hand(t, r.s, r.now, req)
	if len(data) != 4 {
		t.Fatalf("%d data frames after admitting again", len(data))
	}
	// T: data naming a controller T is not connected to is refused.
	var forged [][]byte
	for _, f := range data {
		var p wire.Packet
		must(t, p.DecodeWith(bytes.Clone(f), wire.AcceptOOO))
		p.XTPController.QPN = 0x77
		b := make([]byte, frameSize)
		n, err := p.Encode(b)
		must(t, err)
		forged = append(forged, b[:n])
	}
	if out := hand(t, r.t, r.now, forged...); len(out) != 0 || r.t.q.Stats().Get(CtrOOO3PRefused) != 4 {
		t.Fatalf("T answered forged data with %d frames (refused %d)", len(out), r.t.q.Stats().Get(CtrOOO3PRefused))
	}
	if !bytes.Equal(r.bufT[:4096], make([]byte, 4096)) {
		t.Fatal("refused data changed T's memory")
	}
	if out := hand(t, r.t, r.now, data...); len(out) != 1 || !bytes.Equal(r.bufT[:4096], r.bufS[:4096]) {
		t.Fatalf("the genuine data: %d completions", len(out))
	}
}

// TestOOO3PBadRKey: S's rkey not covering the source is a protection error
// at S: nothing streams, C never gets a completion.
func TestOOO3PBadRKey(t *testing.T) {
	r := newTrio(t)
	w := r.wr(2, 1, 0, 0, 2048)
	w.RKey++
	must(t, r.c.q.PostSend(w))
	if out := hand(t, r.s, r.now, sent(r.c, r.now)...); len(out) != 0 {
		t.Fatalf("S streamed %d frames from a bad rkey", len(out))
	}
	wcs := make([]WC, 4)
	if k, _ := r.s.cq.Poll(wcs); k != 1 || wcs[0].Status != WCRemAccessErr {
		t.Fatalf("S's completions %+v", wcs[:k])
	}
}

// TestOOO3PPost: the post checks of a third-party READ.
func TestOOO3PPost(t *testing.T) {
	r := newTrio(t)
	for name, f := range map[string]func(w *SendWR){
		"sgl":       func(w *SendWR) { w.SGL = []mr.SGE{sge(r.ms, 0, 8)} },
		"no gid":    func(w *SendWR) { w.Sink.GID = netip.Addr{} },
		"qpn 0":     func(w *SendWR) { w.Sink.QPN = 0 },
		"ctx 0":     func(w *SendWR) { w.Sink.Ctx = 0 },
		"condition": func(w *SendWR) { w.CondQueue = 1 },
	} {
		w := r.wr(0, 1, 0, 0, 100)
		f(w)
		if err := r.c.q.PostSend(w); err == nil {
			t.Errorf("%s: posted", name)
		}
	}
}

// TestGoldenOOO3P builds the third-party golden captures from what the
// engines send and compares them byte for byte: C's view
// (ooo-third-party-c: its request out, T's completion in), S's
// (ooo-third-party-s: the request in, 3 OOO_3P_WRITEs out, nothing else
// in) and T's (ooo-third-party-t: the writes in, shuffled, with a
// duplicate; the completion out to C).
func TestGoldenOOO3P(t *testing.T) {
	r := newTrio(t)
	fill(r.bufS[:2500], 7)
	must(t, r.c.q.PostSend(r.wr(3, 5, 100, 8, 2500)))
	cv, sv, tv := &capRec{name: "ooo-third-party-c"}, &capRec{name: "ooo-third-party-s"}, &capRec{name: "ooo-third-party-t"}
	req := sent(r.c, r.now)
	cv.add(capture.DirOutbound, req...)
	sv.add(capture.DirInbound, req...)
	data := hand(t, r.s, r.now, req...)
	if len(data) != 3 {
		t.Fatalf("%d data frames", len(data))
	}
	sv.add(capture.DirOutbound, data...)
	var cpl [][]byte
	for _, f := range [][]byte{data[2], data[0], data[0], data[1]} {
		tv.add(capture.DirInbound, f)
		out := hand(t, r.t, r.now, f)
		tv.add(capture.DirOutbound, out...)
		cpl = append(cpl, out...)
	}
	if len(cpl) != 1 || !bytes.Equal(r.bufT[8:2508], r.bufS[100:2600]) {
		t.Fatalf("%d completions; T's memory exact %v", len(cpl), bytes.Equal(r.bufT[8:2508], r.bufS[100:2600]))
	}
	cv.add(capture.DirInbound, cpl...)
	hand(t, r.c, r.now, cpl...)
	wcs := make([]WC, 4)
	if k, _ := r.c.cq.Poll(wcs); k != 2 || wcs[1].Opcode != WCOOODelivered {
		t.Fatalf("C's completions %+v", wcs[:k])
	}
	cv.check(t, "veth-c")
	sv.check(t, "veth-s")
	tv.check(t, "veth-t")
}

// TestOOO3PNoAlloc: a third-party operation — C's request, S's stream, T's
// placement and completion, C's delivered completion — allocates nothing
// once the contexts have been used.
func TestOOO3PNoAlloc(t *testing.T) {
	r := newTrio(t)
	wr := r.wr(0, 1, 0, 0, 4000)
	wr.Flags = 0 // the delivered completion only
	wcs := make([]WC, 8)
	var pkt wire.Packet
	give := func(e *end, frames [][]byte) {
		for _, f := range frames {
			if err := pkt.DecodeWith(f, wire.AcceptOOO); err != nil {
				t.Fatal(err)
			}
			e.q.Receive(&pkt, r.now, e.out)
		}
	}
	// take moves e's committed frames into buf (reused) and frees e's buffers.
	take := func(e *end, buf [][]byte) [][]byte {
		e.q.Progress(r.now, e.out)
		return append(buf[:0], e.out.committed...)
	}
	reset := func(e *end) {
		e.out.committed = e.out.committed[:0]
		e.out.free = len(e.out.pool)
	}
	req, data, cpl := make([][]byte, 0, 8), make([][]byte, 0, 8), make([][]byte, 0, 8)
	run := func() {
		wr.TID++
		if err := r.c.q.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		req = take(r.c, req)
		give(r.s, req)
		reset(r.c)
		data = take(r.s, data)
		give(r.t, data)
		reset(r.s)
		cpl = take(r.t, cpl)
		give(r.c, cpl)
		reset(r.t)
		if n, _ := r.c.cq.Poll(wcs); n != 1 || wcs[0].Opcode != WCOOODelivered || wcs[0].TID != wr.TID {
			t.Fatalf("C's completions %+v", wcs[:n])
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("%.1f allocations per third-party operation", n)
	}
}
