package roce_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// opKey names an operation among replies and completions.
type opKey struct {
	ctx roce.Ctx
	tid uint32
}

// completionsByOp counts the OOO_COMPLETION packets among ps by the
// target's context (their XRH initiator) and tid.
func completionsByOp(tb testing.TB, ps []wire.Packet) map[opKey]int {
	tb.Helper()
	m := map[opKey]int{}
	completions(tb, ps) // checks where they go
	for i := range ps {
		if ps[i].BTH.Opcode == wire.OOOCompletion {
			m[opKey{ps[i].XRH.Initiator, ps[i].XRH.TID}]++
		}
	}
	return m
}

// checkOps checks that each op landed byte for byte and completed exactly
// once, at the target (one WCOOOTarget) and towards the initiator (one
// completion packet), and that nothing else came.
func (t *oooTarget) checkOps(ops []*oooOp) {
	t.tb.Helper()
	ws := wcs(t.tb, t.rcq)
	cp := completionsByOp(t.tb, t.replies())
	got := map[opKey]int{}
	for _, w := range ws {
		if w.Status != roce.WCSuccess || w.Opcode != roce.WCOOOTarget {
			t.tb.Errorf("target completion %+v", w)
		}
		got[opKey{w.Ctx, w.TID}]++
	}
	for _, o := range ops {
		off := o.va - t.mr.Addr()
		if !bytes.Equal(t.buf[off:off+uint64(len(o.data))], o.data) {
			t.tb.Fatalf("ctx %v tid %d: memory differs from the data written", o.ctx, o.tid)
		}
		k := opKey{o.ctx, o.tid}
		if got[k] != 1 || cp[k] != 1 {
			t.tb.Fatalf("ctx %v tid %d: %d target completions, %d completion packets; want 1 and 1", o.ctx, o.tid, got[k], cp[k])
		}
	}
	if len(ws) != len(ops) || len(cp) != len(ops) {
		t.tb.Fatalf("%d target completions, %d completion packets for %d operations", len(ws), len(cp), len(ops))
	}
}

// permutations returns every ordering of 0..n-1.
func permutations(n int) [][]uint32 {
	if n == 0 {
		return [][]uint32{{}}
	}
	var out [][]uint32
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := make([]uint32, 0, n)
			q = append(q, p[:i]...)
			q = append(q, uint32(n-1))
			q = append(q, p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// runShuffled sends ops, each in the order orders gives, interleaving the
// operations frame by frame, and checks them.
func (t *oooTarget) runShuffled(ops []*oooOp, orders [][]uint32) {
	t.tb.Helper()
	var frames [][]byte
	for k := 0; ; k++ {
		more := false
		for i, o := range ops {
			if k < len(orders[i]) {
				frames = append(frames, t.frame(o, orders[i][k]))
				more = true
			}
		}
		if !more {
			break
		}
	}
	before := t.dev.Stats().OOO.DupIndex
	t.inject(frames)
	t.checkOps(ops)
	dups := 0
	for i, o := range ops {
		dups += len(orders[i]) - int(o.packets())
	}
	if got := t.dev.Stats().OOO.DupIndex - before; got != uint64(dups) {
		t.tb.Fatalf("dup_index rose by %d, want %d", got, dups)
	}
}

// TestOOOWriteEveryPermutation: every order of a 6-packet WRITE, with two
// duplicates each, leaves the same bytes in memory and completes once at the
// target and once towards the initiator (16 operations at a time, one per
// context, each permutation a new tid).
func TestOOOWriteEveryPermutation(t *testing.T) {
	const nctx = 16
	tg := newOOOTarget(t, 1, nctx)
	rng := rand.New(rand.NewPCG(6, 6))
	perms := permutations(6)
	if len(perms) != 720 {
		t.Fatalf("%d permutations", len(perms))
	}
	for b := 0; b < len(perms); b += nctx {
		var ops []*oooOp
		var orders [][]uint32
		for i := b; i < min(b+nctx, len(perms)); i++ {
			c := i - b
			o := &oooOp{ctx: tg.ctx[c], tid: uint32(b/nctx + 1), va: tg.mr.Addr() + uint64(c)*2048,
				rkey: tg.mr.RKey(), notify: roce.NotifyBoth, tag: uint32(i), seg: roce.MTU256, data: make([]byte, 5*256+100)}
			for j := range o.data {
				o.data[j] = byte(rng.Uint32())
			}
			p := perms[i]
			order := append([]uint32(nil), p[:i%6]...)
			order = append(order, p[(i+1)%6]) // a duplicate, before or after its original
			order = append(order, p[i%6:]...)
			order = append(order, p[0])
			ops, orders = append(ops, o), append(orders, order)
		}
		tg.runShuffled(ops, orders)
	}
	if s := tg.dev.Stats().OOO; s.StaleCtx != 0 || s.StaleTID != 0 || s.ProtectionErrors != 0 || s.CompletionsSent != 720 {
		t.Errorf("counters %+v", s)
	}
}

// TestOOOWriteShuffled: 1,000 seeded shuffles of a 64-packet WRITE, each
// with up to 8 duplicates at random places.
func TestOOOWriteShuffled(t *testing.T) {
	const nctx = 8
	tg := newOOOTarget(t, 2, nctx)
	rng := rand.New(rand.NewPCG(64, 1000))
	total := 64*256 - 37
	for b := 0; b < 1000; b += nctx {
		var ops []*oooOp
		var orders [][]uint32
		for c := range nctx {
			o := &oooOp{ctx: tg.ctx[c], tid: uint32(b/nctx + 1), va: tg.mr.Addr() + uint64(c)*(64<<10) + uint64(rng.IntN(4096)),
				rkey: tg.mr.RKey(), notify: roce.NotifyBoth, tag: uint32(b + c), seg: roce.MTU256, data: make([]byte, total)}
			for j := range o.data {
				o.data[j] = byte(rng.Uint32())
			}
			order := make([]uint32, 64)
			for j := range order {
				order[j] = uint32(j)
			}
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for range rng.IntN(9) {
				at := rng.IntN(len(order) + 1)
				dup := order[rng.IntN(len(order))]
				order = append(order[:at], append([]uint32{dup}, order[at:]...)...)
			}
			ops, orders = append(ops, o), append(orders, order)
		}
		tg.runShuffled(ops, orders)
	}
}

// seq returns 0..n-1.
func seq(n uint32) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(i)
	}
	return s
}

// TestOOOStaleTID: after tid 5 completed, a tid 4 packet carrying poison
// bytes changes nothing, counts as stale and answers nothing; a duplicate of
// tid 5 counts as a duplicate.
func TestOOOStaleTID(t *testing.T) {
	tg := newOOOTarget(t, 3, 1)
	o := &oooOp{ctx: tg.ctx[0], tid: 5, va: tg.mr.Addr(), rkey: tg.mr.RKey(), notify: roce.NotifyBoth, seg: roce.MTU1024,
		data: bytes.Repeat([]byte{0xA5}, 3000)}
	tg.inject(tg.frames(o, 2, 0, 1))
	tg.checkOps([]*oooOp{o})
	poison := *o
	poison.tid, poison.data = 4, bytes.Repeat([]byte{0xEE}, 3000)
	before := tg.dev.Stats().OOO
	tg.inject(tg.frames(&poison, 0, 1, 2))
	tg.inject(tg.frames(o, 1))
	after := tg.dev.Stats().OOO
	if !bytes.Equal(tg.buf[:3000], o.data) {
		t.Fatal("a stale packet changed memory")
	}
	if after.StaleTID-before.StaleTID != 3 || after.DupIndex-before.DupIndex != 1 {
		t.Errorf("stale_tid +%d (want 3), dup_index +%d (want 1)", after.StaleTID-before.StaleTID, after.DupIndex-before.DupIndex)
	}
	if w, r := wcs(t, tg.rcq), tg.replies(); len(w) != 0 || len(r) != 0 {
		t.Errorf("stale packets gave %d completions and %d frames", len(w), len(r))
	}
}

// TestOOONewTIDResets: a tid+1 packet in the middle of an operation resets
// the context: the old tid never completes (its later packets are stale),
// the new one completes once with its own bytes.
func TestOOONewTIDResets(t *testing.T) {
	tg := newOOOTarget(t, 4, 1)
	old := &oooOp{ctx: tg.ctx[0], tid: 7, va: tg.mr.Addr(), rkey: tg.mr.RKey(), notify: roce.NotifyBoth, seg: roce.MTU256,
		data: bytes.Repeat([]byte{1}, 2048)}
	nw := *old
	nw.tid, nw.data = 8, bytes.Repeat([]byte{2}, 2048)
	tg.inject(tg.frames(old, 0, 1, 2, 3))
	tg.inject(tg.frames(&nw, 5))
	before := tg.dev.Stats().OOO.StaleTID
	tg.inject(tg.frames(old, 4, 5, 6, 7))
	if got := tg.dev.Stats().OOO.StaleTID - before; got != 4 {
		t.Errorf("the old tid's last packets: stale_tid +%d, want 4", got)
	}
	if w, r := wcs(t, tg.rcq), tg.replies(); len(w) != 0 || len(r) != 0 {
		t.Fatalf("the old tid completed: %+v, %d frames", w, len(r))
	}
	tg.inject(tg.frames(&nw, 7, 6, 4, 3, 2, 1, 0))
	tg.checkOps([]*oooOp{&nw})
}

// TestOOOReadIgnored: READ requests with a tid not newer than the
// context's, or on a busy context, get no response frame at all; a good one
// gets its whole response.
func TestOOOReadIgnored(t *testing.T) {
	tg := newOOOTarget(t, 5, 2)
	fill(tg.buf[:8192], 9)
	w := &oooOp{ctx: tg.ctx[0], tid: 3, va: tg.mr.Addr() + 65536, rkey: tg.mr.RKey(), notify: roce.NotifyNone, seg: roce.MTU1024,
		data: make([]byte, 4096)}
	tg.inject(tg.frames(w, 0, 3)) // ctx 0: a WRITE being placed, tid 3
	rd := func(ctx roce.Ctx, tid uint32) *oooOp {
		return &oooOp{op: wire.OOOReadReq, ctx: ctx, tid: tid, va: tg.mr.Addr(), rkey: tg.mr.RKey(), notify: roce.NotifyInitiator,
			seg: roce.MTU1024, total: 8000, sinkVA: 0x10000}
	}
	before := tg.dev.Stats().OOO
	tg.inject([][]byte{tg.frame(rd(tg.ctx[0], 3), 0), tg.frame(rd(tg.ctx[0], 2), 0), tg.frame(rd(tg.ctx[0], 4), 0)})
	if r := tg.replies(); len(r) != 0 {
		t.Fatalf("%d frames answered ignored READ requests", len(r))
	}
	after := tg.dev.Stats().OOO
	if after.StaleTID-before.StaleTID != 2 || after.ReadBusy-before.ReadBusy != 1 {
		t.Errorf("stale_tid +%d (want 2), read_busy +%d (want 1)", after.StaleTID-before.StaleTID, after.ReadBusy-before.ReadBusy)
	}
	// A good READ on ctx 1 streams 8 packets; a second one with the same tid
	// while it streams, or after, is ignored.
	good := rd(tg.ctx[1], 1)
	tg.inject([][]byte{tg.frame(good, 0), tg.frame(good, 0)})
	var got []wire.Packet
	for range 2000 {
		if got = append(got, tg.replies()...); len(got) >= 8 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	got = append(got, tg.replies()...)
	if len(got) != 8 {
		t.Fatalf("%d response frames, want 8", len(got))
	}
	resp := make([]byte, 8000)
	for _, p := range got {
		if p.BTH.Opcode != wire.OOOWrite || p.XRH.Ctx != oooPeerCtx || p.XRH.Initiator != tg.ctx[1] || p.XRH.TID != 1 ||
			p.RETH.RKey != 0x5151 || p.RETH.VA != 0x10000+p.XRH.Offset(p.BTH.PSN) {
			t.Fatalf("response %+v %+v", p.BTH, p.XRH)
		}
		copy(resp[p.XRH.Offset(p.BTH.PSN):], p.Payload)
	}
	if !bytes.Equal(resp, tg.buf[:8000]) {
		t.Fatal("the response does not carry the source's bytes")
	}
}

// TestOOONotifyNone: notify none places the data and sends nothing back.
func TestOOONotifyNone(t *testing.T) {
	tg := newOOOTarget(t, 6, 1)
	o := &oooOp{ctx: tg.ctx[0], tid: 1, va: tg.mr.Addr() + 7, rkey: tg.mr.RKey(), notify: roce.NotifyNone, seg: roce.MTU512,
		data: bytes.Repeat([]byte{0x3C}, 1500)}
	tg.inject(tg.frames(o, 2, 1, 0, 1))
	if !bytes.Equal(tg.buf[7:1507], o.data) {
		t.Fatal("data not placed")
	}
	if w, r := wcs(t, tg.rcq), tg.replies(); len(w) != 0 || len(r) != 0 {
		t.Fatalf("notify none: %d completions, %d frames", len(w), len(r))
	}
	// Notify target only: a target completion, no frame.
	o.tid, o.notify = 2, roce.NotifyTarget
	tg.inject(tg.frames(o, 0, 1, 2))
	if w, r := wcs(t, tg.rcq), tg.replies(); len(w) != 1 || len(r) != 0 || w[0].TID != 2 {
		t.Fatalf("notify target: completions %+v, %d frames", w, len(r))
	}
}

// TestOOOBadRKey: one packet of an operation with a bad rkey is dropped,
// the target's user gets an IBV_WC_REM_ACCESS_ERR completion, that tid never
// completes (even once every other packet came), and the queue pair stays
// in RTS and completes the next tid.
func TestOOOBadRKey(t *testing.T) {
	tg := newOOOTarget(t, 7, 1)
	o := &oooOp{ctx: tg.ctx[0], tid: 1, va: tg.mr.Addr(), rkey: tg.mr.RKey(), notify: roce.NotifyBoth, seg: roce.MTU256,
		data: bytes.Repeat([]byte{0x11}, 1024)}
	bad := *o
	bad.rkey ^= 0x5A5A
	tg.inject(tg.frames(o, 0, 1))
	tg.inject(tg.frames(&bad, 2))
	tg.inject(tg.frames(o, 3, 2))
	ws := wcs(t, tg.rcq)
	if len(ws) != 1 || ws[0].Status != roce.WCRemAccessErr || ws[0].Opcode != roce.WCOOOTarget || ws[0].TID != 1 || ws[0].Ctx != tg.ctx[0] {
		t.Fatalf("target completions %+v, want one IBV_WC_REM_ACCESS_ERR for tid 1", ws)
	}
	if r := tg.replies(); len(r) != 0 {
		t.Fatalf("%d frames for a tid with a protection error", len(r))
	}
	if s := tg.dev.Stats().OOO; s.ProtectionErrors != 1 {
		t.Errorf("protection errors %d, want 1", s.ProtectionErrors)
	}
	if st := tg.qp.State(); st != roce.StateRTS {
		t.Fatalf("queue pair in %v", st)
	}
	o.tid = 2
	tg.inject(tg.frames(o, 3, 2, 1, 0))
	tg.checkOps([]*oooOp{o})
}

// TestOOOTrickle: frames from before a recovery, or from before a context
// was released and acquired again, are dropped as stale contexts when
// replayed: memory does not change, nothing is answered, the queue pair
// stays in RTS.
func TestOOOTrickle(t *testing.T) {
	tg := newOOOTarget(t, 8, 2)
	o := &oooOp{ctx: tg.ctx[0], tid: 3, va: tg.mr.Addr(), rkey: tg.mr.RKey(), notify: roce.NotifyBoth, seg: roce.MTU256,
		data: bytes.Repeat([]byte{0x77}, 1000)}
	old := tg.frames(o, seq(o.packets())...)
	o2 := *o
	o2.ctx, o2.va = tg.ctx[1], tg.mr.Addr()+4096
	old2 := tg.frames(&o2, seq(o2.packets())...)
	tg.inject(old)
	tg.inject(old2)
	tg.checkOps([]*oooOp{o, &o2})
	clear(tg.buf[:8192])

	rec, err := tg.qp.RecoverContexts()
	if err != nil || len(rec) != 2 || rec[0].ID() != tg.ctx[0].ID() || rec[0].Key() == tg.ctx[0].Key() {
		t.Fatalf("recover: %v, %v (had %v)", rec, err, tg.ctx)
	}
	if err := tg.qp.ReleaseContexts(rec[1:]); err != nil {
		t.Fatal(err)
	}
	again, err := tg.qp.AcquireContexts(1)
	if err != nil || again[0].ID() == rec[1].ID() {
		t.Fatalf("acquire after release: %v, %v: the FIFO handed the released context out first", again, err)
	}
	before := tg.dev.Stats().OOO.StaleCtx
	tg.inject(old)
	tg.inject(old2)
	if got := tg.dev.Stats().OOO.StaleCtx - before; got != uint64(len(old)+len(old2)) {
		t.Errorf("stale_ctx +%d, want %d", got, len(old)+len(old2))
	}
	if !bytes.Equal(tg.buf[:8192], make([]byte, 8192)) {
		t.Fatal("replayed frames changed memory")
	}
	if w, r := wcs(t, tg.rcq), tg.replies(); len(w) != 0 || len(r) != 0 {
		t.Fatalf("replayed frames gave %d completions, %d frames", len(w), len(r))
	}
	if st := tg.qp.State(); st != roce.StateRTS {
		t.Fatalf("queue pair in %v", st)
	}
	// The recovered context works with its new key, from tid 1.
	o.ctx, o.tid = rec[0], 1
	tg.inject(tg.frames(o, 3, 2, 1, 0))
	tg.checkOps([]*oooOp{o})
}

// TestOOOReadInterleaved: two queue pairs of one device each serve a READ
// of 64 packets requested at the same moment: their responses interleave on
// the link, at most 16 packets of one before the other's (the device runs
// every queue pair with work once per round, each sends 16 packets).
func TestOOOReadInterleaved(t *testing.T) {
	tg := newOOOTarget(t, 10, 1)
	pd2 := tg.dev.AllocPD()
	q2, err := pd2.CreateQP(roce.QPConfig{Type: roce.OOO, SendCQ: tg.scq, RecvCQ: tg.rcq})
	if err != nil {
		t.Fatal(err)
	}
	if err := q2.Connect(0, roce.Endpoint{QPN: oooPeerQPN + 1, GID: roce.GIDFromIP(addrA)}, nil); err != nil {
		t.Fatal(err)
	}
	c2, err := q2.AcquireContexts(1)
	if err != nil {
		t.Fatal(err)
	}
	buf2 := make([]byte, 64<<10)
	fill(buf2, 1)
	mr2, err := pd2.RegMR(buf2, roce.LocalWrite|roce.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	r1 := &oooOp{op: wire.OOOReadReq, ctx: tg.ctx[0], tid: 1, va: tg.mr.Addr(), rkey: tg.mr.RKey(), notify: roce.NotifyInitiator,
		seg: roce.MTU1024, total: 64 << 10, sinkVA: 0x100000}
	f1 := tg.frame(r1, 0)
	r2 := *r1
	r2.ctx, r2.va, r2.rkey = c2[0], mr2.Addr(), mr2.RKey()
	f2 := tg.frame(&r2, 0)
	f2b := append([]byte(nil), f2...)
	// frame() addressed both to the first QP: re-encode the second for q2.
	var p wire.Packet
	if err := p.DecodeWith(f2b, wire.AcceptOOO); err != nil {
		t.Fatal(err)
	}
	p.BTH.DestQPN = q2.QPN()
	n, err := p.Encode(f2)
	if err != nil {
		t.Fatal(err)
	}
	tg.inject([][]byte{f1, f2[:n]})
	var got []wire.Packet
	for i := 0; i < 5000 && len(got) < 128; i++ {
		got = append(got, tg.replies()...)
		time.Sleep(time.Millisecond)
	}
	if len(got) != 128 {
		t.Fatalf("%d response frames, want 128", len(got))
	}
	run, longest, first2 := 0, 0, -1
	for i := range got {
		if i > 0 && got[i].BTH.DestQPN == got[i-1].BTH.DestQPN {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
		if first2 < 0 && got[i].BTH.DestQPN != got[0].BTH.DestQPN {
			first2 = i
		}
	}
	if longest > 16 || first2 < 0 || first2 > 16 {
		t.Errorf("responses not interleaved: longest run %d, the second stream starts at frame %d", longest, first2)
	}
}

// TestOOOReplayCaptureAfterRecovery: the inbound frames of the golden
// capture ooo-write-shuffled, replayed to a queue pair holding the very
// context they name (same QPN, same context seed, so the same key) after a
// recovery, are all dropped as stale contexts: no memory changes, no
// completion, no frame, the queue pair stays in RTS.
func TestOOOReplayCaptureAfterRecovery(t *testing.T) {
	data, err := os.ReadFile("../testdata/pcaps/ooo-write-shuffled.pcapng")
	if err != nil {
		t.Fatal(err)
	}
	r, err := capture.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	var named roce.Ctx
	var f capture.Frame
	for {
		if err := r.Next(&f); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if f.Dir != capture.DirInbound {
			continue
		}
		var p wire.Packet
		if err := p.DecodeWith(f.Data, wire.AcceptOOO); err != nil {
			t.Fatal(err)
		}
		named = p.XRH.Ctx
		frames = append(frames, bytes.Clone(f.Data))
	}
	// roce/qp's golden test gave B (QPN 0x12) a pool seeded 2.
	tg := newOOOTargetQPN(t, 2, 1, 0x12)
	if tg.ctx[0] != named || len(frames) != 5 {
		t.Fatalf("the device's context is %v, the capture's %v (%d frames): the replay would prove nothing", tg.ctx[0], named, len(frames))
	}
	if _, err := tg.qp.RecoverContexts(); err != nil {
		t.Fatal(err)
	}
	fill(tg.buf, 3)
	before := bytes.Clone(tg.buf)
	tg.inject(frames)
	s := tg.dev.Stats()
	if s.OOO.StaleCtx != uint64(len(frames)) || s.OOO.ProtectionErrors != 0 || s.QPDropped != 0 {
		t.Errorf("stale_ctx %d (want %d); stats %+v", s.OOO.StaleCtx, len(frames), s.OOO)
	}
	if !bytes.Equal(tg.buf, before) {
		t.Fatal("the replay changed memory")
	}
	if w, rp := wcs(t, tg.rcq), tg.replies(); len(w) != 0 || len(rp) != 0 || tg.qp.State() != roce.StateRTS {
		t.Fatalf("the replay gave %d completions, %d frames; state %v", len(w), len(rp), tg.qp.State())
	}
}

// TestOOOOnlyToOOOQPs: on a device with an OOO queue pair, an OOO_WRITE
// addressed to one of its RC queue pairs is still malformed (as on a device
// without OOO mode) and lands nowhere; an RC WRITE addressed to the OOO queue
// pair is dropped by it.
func TestOOOOnlyToOOOQPs(t *testing.T) {
	tg := newOOOTarget(t, 11, 1)
	rcq, err := tg.dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := tg.dev.AllocPD().CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: rcq, RecvCQ: rcq})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Connect(0, roce.Endpoint{QPN: oooPeerQPN, GID: roce.GIDFromIP(addrA)}, nil); err != nil {
		t.Fatal(err)
	}
	o := &oooOp{ctx: tg.ctx[0], tid: 1, va: tg.mr.Addr(), rkey: tg.mr.RKey(), notify: roce.NotifyBoth, seg: roce.MTU256,
		data: bytes.Repeat([]byte{0xEE}, 200)}
	f := tg.frame(o, 0)
	var p wire.Packet
	if err := p.DecodeWith(bytes.Clone(f), wire.AcceptOOO); err != nil {
		t.Fatal(err)
	}
	p.BTH.DestQPN = rc.QPN()
	toRC := make([]byte, len(f))
	if _, err := p.Encode(toRC); err != nil {
		t.Fatal(err)
	}
	std := wire.Packet{SrcIP: addrA, DstIP: addrB, TTL: 64, SrcPort: 0xC000, DstPort: wire.UDPPort,
		BTH:  wire.BTH{Opcode: wire.RCWriteOnly, PKey: 0xFFFF, DestQPN: tg.qp.QPN()},
		RETH: wire.RETH{VA: tg.mr.Addr(), RKey: tg.mr.RKey(), DMALen: 200}, Payload: o.data}
	toOOO := make([]byte, 400)
	n, err := std.Encode(toOOO)
	if err != nil {
		t.Fatal(err)
	}
	tg.inject([][]byte{toRC, toOOO[:n]})
	s := tg.dev.Stats()
	if s.DropMalformed != 1 || s.QPDropped != 1 {
		t.Errorf("malformed %d (want 1), qp_dropped %d (want 1)", s.DropMalformed, s.QPDropped)
	}
	if !bytes.Equal(tg.buf[:200], make([]byte, 200)) {
		t.Fatal("memory changed")
	}
}
