package qp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/xdproce/xdproce/roce/mr"
)

func TestSendRecvBasic(t *testing.T) {
	p := newPair(t, defaultOpts())
	src, sb := p.a.reg(t, 100, allAcc)
	dst, db := p.b.reg(t, 200, allAcc)
	fill(sb, 3)
	must(t, p.b.q.PostRecv(&RecvWR{ID: 7, SGL: []mr.SGE{sge(dst, 0, 200)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 9, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(src, 0, 100)}}))
	wa := p.poll(p.a, 1)
	wb := p.poll(p.b, 1)
	if d := cmp.Diff([]WC{{ID: 9, Status: WCSuccess, Opcode: WCSend, ByteLen: 100, QPN: 0x11}}, wa); d != "" {
		t.Errorf("send WC (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]WC{{ID: 7, Status: WCSuccess, Opcode: WCRecv, ByteLen: 100, QPN: 0x12, SrcQPN: 0x11}}, wb); d != "" {
		t.Errorf("recv WC (-want +got):\n%s", d)
	}
	if !bytes.Equal(db[:100], sb) {
		t.Fatal("payload differs")
	}
}

// TestErrorText: errors of Post, Modify and Destroy name the package once
// and still match their sentinel with errors.Is.
func TestErrorText(t *testing.T) {
	o := defaultOpts()
	o.maxWR = 1
	p := newPair(t, o)
	am, _ := p.a.reg(t, 64, allAcc)
	o.noConnect = true
	idle := newPair(t, o).a.q
	send := func(q *QP) error {
		return q.PostSend(&SendWR{ID: 1, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 8)}})
	}
	must(t, send(p.a.q))
	must(t, p.b.q.Destroy())
	tests := []struct {
		name     string
		err      error
		want     string
		sentinel error
	}{
		{"post send in RESET", send(idle), "qp: post send in RESET: wrong state", ErrState},
		{"post recv in RESET", idle.PostRecv(&RecvWR{ID: 1}), "qp: post recv in RESET: wrong state", ErrState},
		{"modify", idle.Modify(&Attr{State: RTS}, AttrState), "qp: modify RC: RESET -> RTS not allowed: wrong state", ErrState},
		{"send queue full", send(p.a.q), "qp: post send: 1 outstanding: queue full", ErrQueueFull},
		{"post send destroyed", send(p.b.q), "qp: post send: destroyed", ErrDestroyed},
		{"post recv destroyed", p.b.q.PostRecv(&RecvWR{ID: 1}), "qp: post recv: destroyed", ErrDestroyed},
		{"modify destroyed", p.b.q.Modify(&Attr{State: Error}, AttrState), "qp: modify: destroyed", ErrDestroyed},
		{"destroy twice", p.b.q.Destroy(), "qp: destroy: destroyed", ErrDestroyed},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if tc.err.Error() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.err, tc.want)
		}
		if !errors.Is(tc.err, tc.sentinel) {
			t.Errorf("%s: %q is not %q", tc.name, tc.err, tc.sentinel)
		}
	}
}
