package qp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// condPair is an OOO pair with 8 contexts a side for conditional tests.
func condPair(t *testing.T) *oooPair {
	t.Helper()
	p := newOOOPair(t)
	ca, err := p.a.q.AcquireContexts(4)
	must(t, err)
	cb, err := p.b.q.AcquireContexts(4)
	must(t, err)
	p.ca, p.cb = append(p.ca, ca...), append(p.cb, cb...)
	return p
}

// component posts a 1-packet WRITE counting on conditional queue 1, from
// A's context i to B's context i at B's offset i × 1024.
func (p *oooPair) component(t *testing.T, i int, rkey uint32) {
	t.Helper()
	must(t, p.a.q.PostSend(&SendWR{ID: uint64(10 + i), Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, i*1024, 1000)},
		RemoteAddr: p.mb.Addr() + uint64(i)*1024, RKey: rkey, Ctx: p.ca[i], RemoteCtx: p.cb[i], TID: 1,
		Notify: wire.NotifyInitiator | wire.NotifyToSelf, CondQueue: 1, Tag: uint32(i)}))
}

// conditional posts the signal WRITE (1500 bytes: 2 packets) to B's context
// 7, on queue 1 with condition c.
func (p *oooPair) conditional(t *testing.T, c Cond) {
	t.Helper()
	must(t, p.a.q.PostSend(&SendWR{ID: 99, Opcode: WROOOWrite, Flags: Signaled, SGL: []mr.SGE{sge(p.ma, 8192, 1500)},
		RemoteAddr: p.mb.Addr() + 8192, RKey: p.mb.RKey(), RemoteCtx: p.cb[7], TID: 1,
		Notify: wire.NotifyTarget, CondQueue: 1, Cond: c, Tag: 0x516}))
}

// opcodes decodes frames and returns their opcodes and XRH contexts.
func opcodes(t *testing.T, frames [][]byte) (ops []wire.Opcode, ctxs []wire.Ctx) {
	t.Helper()
	var pk wire.Packet
	for _, f := range frames {
		must(t, pk.DecodeWith(f, wire.AcceptOOO))
		ops, ctxs = append(ops, pk.BTH.Opcode), append(ctxs, pk.XRH.Ctx)
	}
	return ops, ctxs
}

func pollAll(q *CQ) []WC {
	wcs := make([]WC, 32)
	n, _ := q.Poll(wcs)
	return wcs[:n]
}

func condGet(t *testing.T, q *QP, id uint8) CondState {
	t.Helper()
	s, err := q.CondCounter(id).Get()
	must(t, err)
	return s
}

// TestGoldenOOOConditional: three components, then a conditional WRITE
// (≥ 3). A's capture (testdata/pcaps/ooo-conditional) holds the three
// components, the three completions, and only then the conditional's two
// packets; nothing of it goes out after one or two completions.
func TestGoldenOOOConditional(t *testing.T) {
	p := condPair(t)
	fill(p.bufA[:10000], 5)
	for i := range 3 {
		p.component(t, i, p.mb.RKey())
	}
	p.conditional(t, Cond{Op: CondGE, Value: 3})
	c := &capRec{name: "ooo-conditional"}
	comps := sent(p.a, p.now)
	if ops, _ := opcodes(t, comps); len(ops) != 3 {
		t.Fatalf("first Progress sent %v, want the 3 components only", ops)
	}
	c.add(capture.DirOutbound, comps...)
	cpls := hand(t, p.b, p.now, comps...)
	if ops, _ := opcodes(t, cpls); len(ops) != 3 || ops[2] != wire.OOOCompletion {
		t.Fatalf("target answered %v, want 3 completions", ops)
	}
	for i, f := range cpls {
		c.add(capture.DirInbound, f)
		out := hand(t, p.a, p.now, f)
		if i < 2 {
			if len(out) != 0 {
				t.Fatalf("after %d completions A sent %d frames", i+1, len(out))
			}
			if s := condGet(t, p.a.q, 1); s.Count != uint32(i+1) || s.Failed {
				t.Fatalf("after %d completions the queue is %+v", i+1, s)
			}
			continue
		}
		ops, ctxs := opcodes(t, out)
		if len(ops) != 2 || ops[0] != wire.OOOWrite || ctxs[0] != p.cb[7] || ctxs[1] != p.cb[7] {
			t.Fatalf("after the 3rd completion A sent %v to %v, want the conditional's 2 OOO_WRITEs", ops, ctxs)
		}
		c.add(capture.DirOutbound, out...)
		if back := hand(t, p.b, p.now, out...); len(back) != 0 {
			t.Fatalf("the signal (notify target) was answered with %d frames", len(back))
		}
	}
	if !bytes.Equal(p.bufB[:1000], p.bufA[:1000]) || !bytes.Equal(p.bufB[8192:8192+1500], p.bufA[8192:8192+1500]) {
		t.Fatal("data not placed")
	}
	var delivered, signal int
	for _, wc := range pollAll(p.a.cq) {
		switch {
		case wc.Opcode == WCOOODelivered && wc.Status == WCSuccess:
			delivered++
		case wc.ID == 99 && wc.Opcode == WCOOOWrite && wc.Status == WCSuccess:
			signal++
		}
	}
	var target int
	for _, wc := range pollAll(p.b.cq) {
		if wc.Opcode == WCOOOTarget && wc.Ctx == p.cb[7] && wc.Status == WCSuccess && wc.ByteLen == 1500 {
			target++
		}
	}
	if delivered != 3 || signal != 1 || target != 1 {
		t.Fatalf("delivered %d (want 3), conditional local %d (want 1), target %d (want 1)", delivered, signal, target)
	}
	c.check(t, "veth-a")
}

// TestOOOConditionalFail: one component's rkey is bad at the target (a
// protection error there, no completion). The conditional waits with the
// count at 2; the upper layer's Fail flushes it with WCWRFlushErr and it
// never goes out; a WRITE posted behind it then goes.
func TestOOOConditionalFail(t *testing.T) {
	p := condPair(t)
	p.component(t, 0, p.mb.RKey())
	p.component(t, 1, p.mb.RKey()^0x5A5A00)
	p.component(t, 2, p.mb.RKey())
	p.conditional(t, Cond{Op: CondGE, Value: 3})
	must(t, p.a.q.PostSend(&SendWR{ID: 100, Opcode: WROOOWrite, Flags: Signaled, SGL: []mr.SGE{sge(p.ma, 0, 10)},
		RemoteAddr: p.mb.Addr() + 16384, RKey: p.mb.RKey(), RemoteCtx: p.cb[6], TID: 1, Notify: wire.NotifyNone}))
	cpls := hand(t, p.b, p.now, sent(p.a, p.now)...)
	if len(cpls) != 2 || p.b.q.Stats().Get(CtrOOOProtErrors) != 1 {
		t.Fatalf("%d completions, %d protection errors at the target; want 2, 1", len(cpls), p.b.q.Stats().Get(CtrOOOProtErrors))
	}
	if out := hand(t, p.a, p.now, cpls...); len(out) != 0 {
		t.Fatalf("A sent %d frames with 2 of 3 components complete", len(out))
	}
	if s := condGet(t, p.a.q, 1); s.Count != 2 || s.Failed {
		t.Fatalf("queue %+v, want count 2, not failed", s)
	}
	must(t, p.a.q.CondCounter(1).Fail())
	ops, ctxs := opcodes(t, sent(p.a, p.now))
	if len(ops) != 1 || ctxs[0] != p.cb[6] {
		t.Fatalf("after Fail A sent %v to %v, want only the WRITE behind the conditional", ops, ctxs)
	}
	var flushed, behind int
	for _, wc := range pollAll(p.a.cq) {
		if wc.ID == 99 {
			if wc.Status != WCWRFlushErr {
				t.Fatalf("conditional completed %v, want WCWRFlushErr", wc.Status)
			}
			flushed++
		}
		if wc.ID == 100 && wc.Status == WCSuccess {
			behind++
		}
	}
	if flushed != 1 || behind != 1 {
		t.Fatalf("flushed %d, later WRITE %d; want 1, 1", flushed, behind)
	}
	if s := condGet(t, p.a.q, 1); !s.Failed {
		t.Fatal("queue not failed after Fail")
	}
	// A second conditional on the failed queue flushes too, until Clear.
	p.conditional(t, Cond{Op: CondGE, Value: 0})
	if out := sent(p.a, p.now); len(out) != 0 {
		t.Fatalf("a conditional on a failed queue sent %d frames", len(out))
	}
	if wcs := pollAll(p.a.cq); len(wcs) != 1 || wcs[0].Status != WCWRFlushErr {
		t.Fatalf("completions %+v, want one flush", wcs)
	}
	must(t, p.a.q.CondCounter(1).Clear())
	if s := condGet(t, p.a.q, 1); s != (CondState{}) {
		t.Fatalf("after Clear %+v", s)
	}
}

// TestOOOConditionalLocalError: a component failing at the initiator (bad
// lkey: an error completion) poisons its queue without Fail.
func TestOOOConditionalLocalError(t *testing.T) {
	p := condPair(t)
	must(t, p.a.q.PostSend(&SendWR{ID: 10, Opcode: WROOOWrite, SGL: []mr.SGE{{Addr: p.ma.Addr(), Length: 100, LKey: p.ma.LKey() ^ 0x777700}},
		RemoteAddr: p.mb.Addr(), RKey: p.mb.RKey(), Ctx: p.ca[0], RemoteCtx: p.cb[0], TID: 1,
		Notify: wire.NotifyInitiator | wire.NotifyToSelf, CondQueue: 1}))
	p.conditional(t, Cond{Op: CondGE, Value: 1})
	if out := sent(p.a, p.now); len(out) != 0 {
		t.Fatalf("sent %d frames", len(out))
	}
	wcs := pollAll(p.a.cq)
	if len(wcs) != 2 || wcs[0].Status != WCLocProtErr || wcs[1].ID != 99 || wcs[1].Status != WCWRFlushErr {
		t.Fatalf("completions %+v, want the component's WCLocProtErr then the conditional's flush", wcs)
	}
	if s := condGet(t, p.a.q, 1); !s.Failed || s.Count != 0 {
		t.Fatalf("queue %+v", s)
	}
}

// TestOOOConditionalCounters: Set, Clear, Get; == N; a condition that holds
// at post goes out at once; bad ids and queue pairs.
func TestOOOConditionalCounters(t *testing.T) {
	p := condPair(t)
	cc := p.a.q.CondCounter(1)
	must(t, cc.Set(5))
	p.conditional(t, Cond{Op: CondGE, Value: 5}) // holds already
	if ops, _ := opcodes(t, sent(p.a, p.now)); len(ops) != 2 {
		t.Fatalf("a conditional whose condition holds sent %v, want 2 frames at once", ops)
	}
	must(t, cc.Set(4))
	must(t, p.a.q.PostSend(&SendWR{ID: 98, Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, 0, 10)},
		RemoteAddr: p.mb.Addr(), RKey: p.mb.RKey(), RemoteCtx: p.cb[6], TID: 1,
		CondQueue: 1, Cond: Cond{Op: CondEQ, Value: 3}}))
	if out := sent(p.a, p.now); len(out) != 0 {
		t.Fatalf("== 3 with the counter at 4 sent %d frames", len(out))
	}
	must(t, cc.Set(3))
	if s := condGet(t, p.a.q, 1); s.Count != 3 {
		t.Fatalf("Get after Set(3): %+v", s)
	}
	if out := sent(p.a, p.now); len(out) != 1 {
		t.Fatalf("== 3 with the counter at 3 sent %d frames, want 1", len(out))
	}
	// == N is checked at each count: two completions arriving in one batch
	// (count 1 then 2) still release == 1.
	must(t, cc.Clear())
	p.component(t, 0, p.mb.RKey())
	p.component(t, 1, p.mb.RKey())
	comps := sent(p.a, p.now)
	must(t, p.a.q.PostSend(&SendWR{ID: 97, Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, 0, 10)},
		RemoteAddr: p.mb.Addr(), RKey: p.mb.RKey(), RemoteCtx: p.cb[5], TID: 1,
		CondQueue: 1, Cond: Cond{Op: CondEQ, Value: 1}}))
	cpls := hand(t, p.b, p.now, comps...)
	for _, f := range cpls {
		must(t, p.a.pkt.DecodeWith(f, wire.AcceptOOO))
		p.a.q.Receive(&p.a.pkt, p.now, p.a.out)
	}
	if _, ctxs := opcodes(t, sent(p.a, p.now)); len(ctxs) != 1 || ctxs[0] != p.cb[5] {
		t.Fatalf("== 1 after counts 1, 2 in one batch sent to %v", ctxs)
	}
	if s := condGet(t, p.a.q, 1); s.Count != 2 {
		t.Fatalf("count %d after two components, want 2", s.Count)
	}
	for _, id := range []uint8{0, MaxCondQueues + 1} {
		if _, err := p.a.q.CondCounter(id).Get(); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Fatalf("queue %d: %v", id, err)
		}
	}
	rc := newPair(t, defaultOpts())
	if err := rc.a.q.CondCounter(1).Set(1); err == nil {
		t.Fatal("Set on an RC queue pair worked")
	}
}

// TestOOOConditionalPostChecks: malformed conditional fields are refused at
// post.
func TestOOOConditionalPostChecks(t *testing.T) {
	p := condPair(t)
	base := SendWR{Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, 0, 10)}, RemoteAddr: p.mb.Addr(), RKey: p.mb.RKey(),
		Ctx: p.ca[0], RemoteCtx: p.cb[0], TID: 1}
	for _, c := range []struct {
		name string
		mod  func(*SendWR)
		want string
	}{
		{"to self without queue", func(w *SendWR) { w.Notify = wire.NotifyInitiator | wire.NotifyToSelf }, "needs a conditional queue"},
		{"cond without queue", func(w *SendWR) { w.Cond = Cond{Op: CondGE, Value: 1} }, "needs a conditional queue"},
		{"queue alone", func(w *SendWR) { w.CondQueue = 2 }, "without notify to self"},
		{"queue out of range", func(w *SendWR) { w.CondQueue = MaxCondQueues + 1; w.Cond.Op = CondGE }, "out of range"},
		{"both", func(w *SendWR) {
			w.CondQueue, w.Notify, w.Cond = 1, wire.NotifyInitiator|wire.NotifyToSelf, Cond{Op: CondGE}
		}, "not both"},
		{"to self without initiator", func(w *SendWR) { w.CondQueue, w.Notify = 1, wire.NotifyTarget|wire.NotifyToSelf }, "initiator bit"},
		{"bad op", func(w *SendWR) { w.CondQueue, w.Cond.Op = 1, CondEQ+1 }, "CondOp(3)"},
	} {
		wr := base
		c.mod(&wr)
		if err := p.a.q.PostSend(&wr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
