package qp

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/roce/mr"
)

// TestConcurrentPostAndPoll: applications post and poll from several
// goroutines while one goroutine runs the engines (run with -race).
func TestConcurrentPostAndPoll(t *testing.T) {
	o := defaultOpts()
	o.maxWR = 64
	p := newPair(t, o)
	am, _ := p.a.reg(t, 4096, allAcc)
	bm, _ := p.b.reg(t, 64*4096, allAcc)
	var rang atomic.Int64
	p.a.q.SetDoorbell(func() { rang.Add(1) })
	const perG, writers = 300, 3
	stop := make(chan struct{})
	engineDone := make(chan struct{})
	go func() { // the progress goroutine
		defer close(engineDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.now += 1000 // the clock moves (RNR waits end)
			if n, _ := p.step(); n == 0 {
				runtime.Gosched()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	// Receivers keep the receive queue full.
	wg.Go(func() {
		for i := 0; i < perG*writers; {
			err := p.b.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(bm, (i%64)*4096, 4096)}})
			if err == nil {
				i++
				continue
			}
			if ctx.Err() != nil {
				t.Error("receiver timed out")
				return
			}
			runtime.Gosched()
		}
	})
	var sent atomic.Int64
	for g := range writers {
		wg.Go(func() {
			for i := 0; i < perG; {
				err := p.a.q.PostSend(&SendWR{ID: uint64(g<<20 | i), Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 100+g)}})
				if err == nil {
					i++
					sent.Add(1)
					continue
				}
				if ctx.Err() != nil {
					t.Error("sender timed out")
					return
				}
				runtime.Gosched()
			}
		})
	}
	// Two pollers on each CQ, one blocking in Wait.
	var gotA, gotB atomic.Int64
	poll := func(cq *CQ, got *atomic.Int64, wait bool) {
		wcs := make([]WC, 8)
		for got.Load() < perG*writers {
			if ctx.Err() != nil {
				t.Error("poller timed out")
				return
			}
			var n int
			var err error
			if wait {
				wctx, c := context.WithTimeout(ctx, 50*time.Millisecond)
				n, err = cq.Wait(wctx, wcs)
				c()
				if err == context.DeadlineExceeded && ctx.Err() == nil {
					continue
				}
			} else {
				n, err = cq.Poll(wcs)
			}
			if err != nil {
				t.Errorf("poll: %v", err)
				return
			}
			for _, w := range wcs[:n] {
				if w.Status != WCSuccess {
					t.Errorf("WC %+v", w)
				}
			}
			got.Add(int64(n))
			if n == 0 {
				runtime.Gosched()
			}
		}
	}
	wg.Go(func() { poll(p.a.cq, &gotA, false) })
	wg.Go(func() { poll(p.a.cq, &gotA, true) })
	wg.Go(func() { poll(p.b.cq, &gotB, true) })
	wg.Wait()
	close(stop)
	<-engineDone
	if gotA.Load() != perG*writers || gotB.Load() != perG*writers {
		t.Fatalf("completions %d / %d, want %d", gotA.Load(), gotB.Load(), perG*writers)
	}
	if rang.Load() < perG*writers {
		t.Errorf("doorbell rang %d times for %d posts", rang.Load(), perG*writers)
	}
}
