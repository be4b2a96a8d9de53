package roce_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// gatedLink delivers at most budget received frames (negative: any number);
// with the budget spent, Receive finds nothing and Wait sleeps briefly.
type gatedLink struct {
	link.Link
	budget atomic.Int64
}

func (g *gatedLink) Receive(frames [][]byte) (int, error) {
	b := g.budget.Load()
	if b == 0 {
		return 0, nil
	}
	if b > 0 && int64(len(frames)) > b {
		frames = frames[:b]
	}
	n, err := g.Link.Receive(frames)
	if b > 0 {
		g.budget.Add(-int64(n))
	}
	return n, err
}

func (g *gatedLink) Wait(timeout time.Duration) error {
	if g.budget.Load() != 0 {
		return g.Link.Wait(timeout)
	}
	if timeout < 0 || timeout > time.Millisecond {
		timeout = time.Millisecond
	}
	time.Sleep(timeout)
	return nil
}

// A responder that finds several full receive batches waiting reads them
// all before its queue pairs answer (rxBurst): 128 WRITE frames held in the
// link, two batches of 64 each ending in an AckReq, get one ACK, not one a
// batch. The requester cannot resend (a fresh connection has no round-trip
// sample for the fast timer; the local ACK timeout is off), so the count is
// exact; the data lands.
func TestRxBurstOneAck(t *testing.T) {
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedLink{Link: lb}
	p := newDevices(t, la, g) // b's RxBatch is the default 64
	o := roce.DefaultConnectOptions()
	o.Reliability, o.Timeout = roce.GoBackN, 0
	x, y := connectRC(t, p, connCfg{bufSize: 256 << 10, opts: &o})
	const size = 128 << 10 // 128 frames at PMTU 1024
	for i := range x.buf[:size] {
		x.buf[i] = byte(i * 13)
	}
	if err := x.qp.PostSend(roce.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, size)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for la.Stats().Delivered < 128 {
		if time.Now().After(deadline) {
			t.Fatalf("the requester sent %d frames, want 128: %+v", la.Stats().Frames, p.a.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	tx0 := p.b.Stats().TxFrames
	g.budget.Store(128)
	if wc := waitWC(t, x.scq); wc.Status != qp.WCSuccess {
		t.Fatalf("WRITE completion %+v", wc)
	}
	if !bytes.Equal(y.buf[:size], x.buf[:size]) {
		t.Error("the WRITE's data did not land")
	}
	sb := p.b.Stats()
	if acks := sb.TxFrames - tx0; acks != 1 {
		t.Errorf("the responder sent %d frames for 128 held WRITE frames (AckReq on the 64th and 128th), want one ACK: %+v", acks, sb)
	}
	if s := la.Stats(); s.Frames != 128 {
		t.Errorf("the requester sent %d frames, want 128 (no resends)", s.Frames)
	}
}
