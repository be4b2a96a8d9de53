package qp

import (
	"errors"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
)

// TestRepostFromCompletion: a completion is visible only once its work
// request's slot is free again, so an application that reposts as soon as
// it polls a completion never gets ErrQueueFull, with queues one entry
// deep. The CQ hook polls and reposts at the moment each completion is
// added, the earliest an application could see it.
func TestRepostFromCompletion(t *testing.T) {
	o := defaultOpts()
	o.maxWR = 1
	p := newPair(t, o)
	am, abuf := p.a.reg(t, 256, allAcc)
	bm, bbuf := p.b.reg(t, 256, allAcc)
	fill(abuf, 9)
	const n = 20
	var sendErrs, recvErrs []error
	var sent, recvd, flushed int
	wcs := make([]WC, 4)
	postSend := func(id int) error {
		return p.a.q.PostSend(&SendWR{ID: uint64(id), Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, id, 64)}})
	}
	postRecv := func(id int) error {
		return p.b.q.PostRecv(&RecvWR{ID: uint64(id), SGL: []mr.SGE{sge(bm, 0, 256)}})
	}
	p.a.cq.afterPush = func() {
		k, _ := p.a.cq.Poll(wcs)
		for _, w := range wcs[:k] {
			if w.Status != WCSuccess {
				t.Errorf("send WC %+v", w)
			}
			if sent++; sent < n {
				if err := postSend(sent); err != nil {
					sendErrs = append(sendErrs, err)
				}
			}
		}
	}
	p.b.cq.afterPush = func() {
		k, _ := p.b.cq.Poll(wcs)
		for _, w := range wcs[:k] {
			if w.Status == WCWRFlushErr {
				if flushed++; flushed == 1 {
					if err := postRecv(99); err != nil {
						recvErrs = append(recvErrs, err)
					}
				}
				continue
			}
			if w.Status != WCSuccess || w.ByteLen != 64 || bbuf[0] != abuf[w.ID-1] {
				t.Errorf("recv WC %+v, data %d want %d", w, bbuf[0], abuf[w.ID-1])
			}
			if recvd++; recvd <= n {
				if err := postRecv(recvd + 1); err != nil {
					recvErrs = append(recvErrs, err)
				}
			}
		}
	}
	must(t, postRecv(1))
	must(t, postSend(0))
	p.run(func() bool { return sent == n && recvd == n }, 100_000)
	report := func() {
		for _, errs := range [][]error{sendErrs, recvErrs} {
			for _, err := range errs {
				if errors.Is(err, ErrQueueFull) {
					t.Errorf("repost right after the completion: %v", err)
				} else if err != nil {
					t.Error(err)
				}
			}
		}
		sendErrs, recvErrs = nil, nil
	}
	report()
	if sent != n || recvd != n {
		t.Fatalf("%d sends and %d receives completed, want %d", sent, recvd, n)
	}
	// Moving to Error flushes the receive posted last; its slot is free as
	// soon as its flush completion shows (the repost is flushed in turn).
	must(t, p.b.q.Modify(&Attr{State: Error}, AttrState))
	p.run(func() bool { return flushed == 2 }, 100)
	if flushed != 2 {
		t.Errorf("%d flush completions, want 2", flushed)
	}
	report()
}
