package roce_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// connectOOO makes an OOO queue pair on each device, connected to each
// other, each holding n contexts.
func connectOOO(tb testing.TB, p *devPair, c connCfg, n int) (x, y *side, cx, cy []roce.Ctx) {
	tb.Helper()
	x = newSide(tb, p.a, roce.OOO, c, 0)
	y = newSide(tb, p.b, roce.OOO, c, 0)
	if err := x.qp.Connect(0, y.endpoint(tb), nil); err != nil {
		tb.Fatal(err)
	}
	if err := y.qp.Connect(0, x.endpoint(tb), nil); err != nil {
		tb.Fatal(err)
	}
	var err error
	if cx, err = x.qp.AcquireContexts(n); err != nil {
		tb.Fatal(err)
	}
	if cy, err = y.qp.AcquireContexts(n); err != nil {
		tb.Fatal(err)
	}
	return x, y, cx, cy
}

// TestOOOWriteRead: an OOO WRITE and an OOO READ between two devices over a
// pipe that reorders and duplicates: the data lands byte for byte, the
// initiator gets its local completion then its delivered one (context, tid,
// tag), the target its target completion, and the counters show the
// completions.
func TestOOOWriteRead(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{MTU: 4200, Seed: 7,
		AtoB: pipe.Faults{Reorder: 0.3, Duplicate: 0.05}, BtoA: pipe.Faults{Reorder: 0.3, Duplicate: 0.05}})
	x, y, cx, cy := connectOOO(t, p, connCfg{}, 2)
	const n = 300_000
	fill(x.buf[:n], 3)
	err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WROOOWrite, Flags: roce.Signaled,
		SGL: []roce.SGE{x.sge(0, n)}, RemoteAddr: y.mr.Addr() + 100, RKey: y.mr.RKey(),
		Ctx: cx[0], RemoteCtx: cy[0], TID: 1, Notify: roce.NotifyBoth, Tag: 0xfeed, Paths: 4})
	if err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOOWrite || wc.ID != 1 || wc.ByteLen != n {
		t.Fatalf("local completion %+v", wc)
	}
	wc := waitWC(t, x.scq)
	if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOODelivered || wc.ID != 1 || wc.Ctx != cx[0] || wc.TID != 1 || wc.Tag != 0xfeed {
		t.Fatalf("delivered completion %+v", wc)
	}
	wc = waitWC(t, y.rcq)
	if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOOTarget || wc.Ctx != cy[0] || wc.TID != 1 || wc.Tag != 0xfeed || wc.ByteLen != n {
		t.Fatalf("target completion %+v", wc)
	}
	if !bytes.Equal(y.buf[100:100+n], x.buf[:n]) {
		t.Fatal("WRITE data differs")
	}

	// READ it back into x's buffer at 1 MiB − n − 8, context cx[1].
	at := len(x.buf) - n - 8
	err = x.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WROOORead, SGL: []roce.SGE{x.sge(at, n)},
		SinkRKey: x.mr.RKey(), RemoteAddr: y.mr.Addr() + 100, RKey: y.mr.RKey(),
		Ctx: cx[1], RemoteCtx: cy[1], TID: 5, Notify: roce.NotifyBoth, Tag: 9})
	if err != nil {
		t.Fatal(err)
	}
	wc = waitWC(t, x.scq)
	if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOODelivered || wc.ID != 2 || wc.Ctx != cx[1] || wc.TID != 5 || wc.Tag != 9 {
		t.Fatalf("READ delivered completion %+v", wc)
	}
	if !bytes.Equal(x.buf[at:at+n], x.buf[:n]) {
		t.Fatal("READ data differs")
	}
	wc = waitWC(t, y.rcq)
	if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOOTarget || wc.Ctx != cy[1] || wc.TID != 5 {
		t.Fatalf("READ source's target completion %+v", wc)
	}
	sa, sb := p.a.Stats().OOO, p.b.Stats().OOO
	if sb.CompletionsSent != 1 || sa.CompletionsReceived != 1 || sa.CompletionsSent != 1 || sb.CompletionsReceived != 1 {
		t.Errorf("completion counters: a %+v, b %+v", sa, sb)
	}
	if qa, qb := x.qp.Stats().OOO, y.qp.Stats().OOO; qa != sa || qb.CompletionsSent != 1 || qb.CompletionsReceived != 1 {
		t.Errorf("queue pair counters: x %+v (device %+v), y %+v", qa, sa, qb)
	}
	if x.qp.State() != roce.StateRTS || y.qp.State() != roce.StateRTS {
		t.Errorf("states %v %v", x.qp.State(), y.qp.State())
	}
}

// TestOOOPostErrors: OOO work requests are checked at post, and the OOO
// opcodes are refused on an RC queue pair.
func TestOOOPostErrors(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	x, _, cx, _ := connectOOO(t, p, connCfg{}, 1)
	good := roce.SendWR{Opcode: roce.WROOOWrite, SGL: []roce.SGE{x.sge(0, 10)}, Ctx: cx[0],
		RemoteCtx: roce.MakeCtx(5, 1), TID: 1, Notify: roce.NotifyInitiator}
	if err := x.qp.PostSend(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*roce.SendWR){
		"tid 0":            func(w *roce.SendWR) { w.TID = 0 },
		"RC opcode":        func(w *roce.SendWR) { w.Opcode = roce.WRRDMAWrite },
		"context not held": func(w *roce.SendWR) { w.Ctx = roce.MakeCtx(cx[0].ID(), cx[0].Key()+1) },
		"no context":       func(w *roce.SendWR) { w.Ctx = 0 },
		"no remote":        func(w *roce.SendWR) { w.RemoteCtx = 0 },
		"notify bits":      func(w *roce.SendWR) { w.Notify = 0x10 },
		"paths":            func(w *roce.SendWR) { w.Paths = roce.MaxOOOPaths + 1 },
		"read two SGEs":    func(w *roce.SendWR) { w.Opcode = roce.WROOORead; w.SGL = append(w.SGL, x.sge(20, 1)) },
	} {
		w := good
		w.SGL = append([]roce.SGE(nil), good.SGL...)
		mod(&w)
		if err := x.qp.PostSend(w); err == nil {
			t.Errorf("%s: posted", name)
		}
	}
	rc := newSide(t, p.a, roce.RC, connCfg{}, 0)
	if _, err := rc.qp.AcquireContexts(1); err == nil {
		t.Error("an RC queue pair acquired contexts")
	}
	if _, err := x.qp.AcquireContexts(roce.DefaultOOOContexts); !errors.Is(err, roce.ErrNoContexts) {
		t.Errorf("acquiring the whole pool again: %v, want ErrNoContexts", err)
	}
}

// TestOOOPathMTU: Connect's default path MTU for an OOO queue pair leaves
// room for the XRH: a 4190-byte link carries RC at 4096 but OOO at 2048
// (4096 + 104 bytes of IPv6, UDP, BTH, RETH, XRH and ICRC would not fit), a
// 4200-byte one both at 4096.
func TestOOOPathMTU(t *testing.T) {
	for _, c := range []struct {
		link    int
		rc, ooo roce.MTU
	}{{4190, roce.MTU4096, roce.MTU2048}, {4200, roce.MTU4096, roce.MTU4096}, {1500, roce.MTU1024, roce.MTU1024}} {
		p, _, _ := newPipeDevices(t, pipe.Config{MTU: c.link})
		x, _, _, _ := connectOOO(t, p, connCfg{bufSize: 4096}, 1)
		if _, a := x.qp.Query(); a.PathMTU != c.ooo || p.a.PathMTU() != c.rc {
			t.Errorf("link MTU %d: OOO path MTU %v (want %v), device %v (want %v)", c.link, a.PathMTU, c.ooo, p.a.PathMTU(), c.rc)
		}
	}
}
