package roce_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// condRun is two devices over a pipe, A's side captured, with connected
// OOO queue pairs holding 8 contexts each.
type condRun struct {
	p      *devPair
	x, y   *side
	cx, cy []roce.Ctx
	buf    bytes.Buffer
	w      *capture.Writer
}

func newCondRun(t *testing.T) *condRun {
	t.Helper()
	r := &condRun{}
	la, lb, err := pipe.New(pipe.Config{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	if r.w, err = capture.NewWriter(&r.buf, nil); err != nil {
		t.Fatal(err)
	}
	r.p = newDevices(t, capture.Wrap(la, r.w), lb)
	r.x, r.y, r.cx, r.cy = connectOOO(t, r.p, connCfg{}, 8)
	return r
}

// component posts a 3-packet WRITE (10,000 bytes) from context i to the
// peer's context i, counting on conditional queue 1, with rkey.
func (r *condRun) component(t *testing.T, i int, rkey uint32) {
	t.Helper()
	if err := r.x.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: roce.WROOOWrite, SGL: []roce.SGE{r.x.sge(i*10000, 10000)},
		RemoteAddr: r.y.mr.Addr() + uint64(i)*10000, RKey: rkey, Ctx: r.cx[i], RemoteCtx: r.cy[i], TID: 1,
		Notify: roce.NotifyInitiator | roce.NotifyToSelf, CondQueue: 1}); err != nil {
		t.Fatal(err)
	}
}

// signal posts the conditional WRITE (≥ n on queue 1) to the peer's
// context 7, notifying the target.
func (r *condRun) signal(t *testing.T, n uint32) {
	t.Helper()
	if err := r.x.qp.PostSend(roce.SendWR{ID: 99, Opcode: roce.WROOOWrite, Flags: roce.Signaled,
		SGL: []roce.SGE{r.x.sge(500_000, 64)}, RemoteAddr: r.y.mr.Addr() + 500_000, RKey: r.y.mr.RKey(),
		RemoteCtx: r.cy[7], TID: 1, Notify: roce.NotifyTarget, CondQueue: 1,
		Cond: roce.Cond{Op: roce.CondGE, Value: n}}); err != nil {
		t.Fatal(err)
	}
}

// frames stops A's device and returns A's captured OOO frames in order.
func (r *condRun) frames(t *testing.T) []wire.Packet {
	t.Helper()
	r.p.a.Close()
	if err := r.w.Flush(); err != nil {
		t.Fatal(err)
	}
	rd, err := capture.NewReader(bytes.NewReader(r.buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.Packet
	var f capture.Frame
	for {
		if err := rd.Next(&f); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		var pk wire.Packet
		if pk.DecodeWith(f.Data, wire.AcceptOOO) == nil && (pk.BTH.Opcode == wire.OOOWrite || pk.BTH.Opcode == wire.OOOCompletion) {
			pk.Payload = nil
			out = append(out, pk)
		}
	}
}

// TestOOOConditionalOrder: four components, then a conditional WRITE
// (≥ 4). In A's capture, the conditional's first frame comes after the
// 4th completion packet; the target gets the signal.
func TestOOOConditionalOrder(t *testing.T) {
	r := newCondRun(t)
	fill(r.x.buf[:40000], 9)
	for i := range 4 {
		r.component(t, i, r.y.mr.RKey())
	}
	r.signal(t, 4)
	wc := waitWC(t, r.y.rcq)
	if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOOTarget || wc.Ctx != r.cy[7] || wc.ByteLen != 64 {
		t.Fatalf("signal's target completion %+v", wc)
	}
	if !bytes.Equal(r.y.buf[:40000], r.x.buf[:40000]) {
		t.Fatal("components' data differs")
	}
	if s, err := r.x.qp.CondCounter(1).Get(); err != nil || s.Count != 4 || s.Failed {
		t.Fatalf("queue 1: %+v %v", s, err)
	}
	cpls, first := 0, -1
	fr := r.frames(t)
	for i, pk := range fr {
		switch {
		case pk.BTH.Opcode == wire.OOOCompletion:
			cpls++
			if first >= 0 {
				t.Fatalf("completion %d (frame %d) after the conditional's first frame %d", cpls, i, first)
			}
		case pk.XRH.Ctx == r.cy[7] && first < 0:
			first = i
			if cpls != 4 {
				t.Fatalf("the conditional's first frame (%d) came after %d completions, want 4", i, cpls)
			}
		}
	}
	if first < 0 || cpls != 4 {
		t.Fatalf("%d completions, conditional at %d in %d frames", cpls, first, len(fr))
	}
}

// TestOOOConditionalFailFlush: one of four components names a bad rkey at
// the target (a protection error there: no completion). The conditional
// waits at a count of 3; the upper layer calls Fail (its timeout) and the
// conditional flushes with WCWRFlushErr, and never goes out.
func TestOOOConditionalFailFlush(t *testing.T) {
	r := newCondRun(t)
	for i := range 4 {
		rkey := r.y.mr.RKey()
		if i == 2 {
			rkey ^= 0x100
		}
		r.component(t, i, rkey)
	}
	r.signal(t, 4)
	if wc := waitWC(t, r.y.rcq); wc.Status != roce.WCRemAccessErr || wc.Ctx != r.cy[2] {
		t.Fatalf("target completion %+v, want the protection error on context 2", wc)
	}
	for range 3 {
		if wc := waitWC(t, r.x.scq); wc.Opcode != roce.WCOOODelivered || wc.Status != roce.WCSuccess {
			t.Fatalf("initiator completion %+v, want delivered", wc)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := r.x.qp.CondCounter(1).Get()
		if err != nil {
			t.Fatal(err)
		}
		if s.Count == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue 1: %+v, want count 3", s)
		}
		time.Sleep(time.Millisecond)
	}
	noWC(t, r.x.scq, 50*time.Millisecond)
	if err := r.x.qp.CondCounter(1).Fail(); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, r.x.scq); wc.ID != 99 || wc.Status != roce.WCWRFlushErr {
		t.Fatalf("conditional completed %+v, want WCWRFlushErr", wc)
	}
	if r.x.qp.State() != roce.StateRTS {
		t.Fatalf("state %v", r.x.qp.State())
	}
	for _, pk := range r.frames(t) {
		if pk.XRH.Ctx == r.cy[7] {
			t.Fatalf("the conditional went out: %v", pk.BTH.Opcode)
		}
	}
}
