package roce_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestCMManyConnections establishes n RDMA CM connections between two
// devices (1,000; 10,000 with -long; 200 with -short), all held at once,
// then disconnects every one and destroys the queue pairs: every dial and
// accept succeeds, every queue pair reaches RTS and then ERROR, and
// afterwards neither CM agent tracks a connection, neither device a queue
// pair beyond QP1, and the heap and RSS are back to where they started
// (rxe is reported to stop answering after about 1,000). The rate and the
// memory are logged, not asserted.
func TestCMManyConnections(t *testing.T) {
	n := 1_000
	switch {
	case *long:
		n = 10_000
	case testing.Short():
		n = 200
	}
	const workers = 64
	p, _, _ := newPipeDevices(t, pipe.Config{})
	l, err := p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type end struct {
		cq *roce.CQ
		pd *roce.PD
	}
	var ends [2]end
	for i, d := range []*roce.Device{p.a, p.b} {
		if ends[i].cq, err = d.CreateCQ(16); err != nil {
			t.Fatal(err)
		}
		ends[i].pd = d.AllocPD()
	}
	qp := func(i int) (*roce.QP, error) {
		return ends[i].pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: ends[i].cq, RecvCQ: ends[i].cq})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p.a.CMConns() // creates a's QP1 (b's came with the listener)
	qps0 := p.a.Stats().QPs + p.b.Stats().QPs
	heap0, rss0, meta0 := memNow(t)

	// The passive side: accept every request with a new queue pair.
	type conn struct {
		k  *roce.CMConn
		qp *roce.QP
	}
	passive := make(chan conn, n)
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				r, err := l.Accept(ctx)
				if err != nil {
					return // the listener closed or the test ends
				}
				q, err := qp(1)
				if err != nil {
					errs <- err
					r.Reject(nil)
					continue
				}
				k, err := r.Accept(ctx, q, nil)
				if err != nil {
					errs <- fmt.Errorf("accept: %w", err)
				}
				passive <- conn{k, q}
			}
		})
	}
	// The active side: n dials from as many workers.
	active := make([]conn, n)
	start := time.Now()
	var dials sync.WaitGroup
	for w := range workers {
		dials.Go(func() {
			for i := w; i < n; i += workers {
				q, err := qp(0)
				if err != nil {
					errs <- err
					return
				}
				k, err := p.a.DialCM(ctx, q, netip.AddrPortFrom(addrB, 7174), nil, &shortCM)
				if err != nil {
					errs <- fmt.Errorf("dial %d: %w", i, err)
					return
				}
				active[i] = conn{k, q}
			}
		})
	}
	dials.Wait()
	established := time.Since(start)
	pass := make([]conn, 0, n)
	for len(pass) < n && len(errs) == 0 {
		select {
		case c := <-passive:
			pass = append(pass, c)
		case <-ctx.Done():
			t.Fatalf("%d of %d connections accepted", len(pass), n)
		}
	}
	if len(errs) > 0 {
		t.Fatal(<-errs)
	}
	for _, c := range append(active, pass...) {
		if st := c.qp.State(); st != roce.StateRTS {
			t.Fatalf("queue pair %#x in %v with every connection up", c.qp.QPN(), st)
		}
	}
	if na, nb := p.a.CMConns(), p.b.CMConns(); na != n || nb != n {
		t.Fatalf("CM agents track %d and %d connections, want %d each", na, nb, n)
	}
	heap1, rss1, _ := memNow(t)

	// Tear down: the active side disconnects; then each side destroys its
	// queue pairs (the passive side's once the DREQ reached them).
	start = time.Now()
	for w := range workers {
		dials.Go(func() {
			for i := w; i < n; i += workers {
				if err := active[i].k.Disconnect(ctx); err != nil {
					errs <- fmt.Errorf("disconnect %d: %w", i, err)
				}
			}
		})
	}
	dials.Wait()
	for w := range workers {
		dials.Go(func() {
			for i := w; i < n; i += workers {
				select {
				case <-pass[i].k.Done():
				case <-ctx.Done():
					errs <- fmt.Errorf("passive connection %d not ended", i)
					return
				}
				for _, q := range []*roce.QP{active[i].qp, pass[i].qp} {
					if st := q.State(); st != roce.StateError {
						errs <- fmt.Errorf("queue pair %#x in %v after the disconnect", q.QPN(), st)
					}
					if err := q.Destroy(); err != nil {
						errs <- err
					}
				}
			}
		})
	}
	dials.Wait()
	closed := time.Since(start)
	if len(errs) > 0 {
		t.Fatal(<-errs)
	}
	l.Close()
	wg.Wait()
	active, pass = nil, nil
	heap2, rss2, meta2 := memNow(t)
	t.Logf("%d RDMA CM connections over link/pipe, %d at a time: established in %v (%.0f connections/s), all %d held at once, disconnected and destroyed in %v (%.0f/s)",
		n, workers, established.Round(time.Millisecond), float64(n)/established.Seconds(), n, closed.Round(time.Millisecond), float64(n)/closed.Seconds())
	t.Logf("memory: heap %d → %d → %d B (%.0f B per connection, both ends), RSS %d → %d → %d B (%.0f B per connection), runtime bookkeeping grew %d B",
		heap0, heap1, heap2, float64(heap1-heap0)/float64(n), rss0, rss1, rss2, float64(rss1-rss0)/float64(n), meta2-meta0)
	if na, nb := p.a.CMConns(), p.b.CMConns(); na+nb != 0 {
		t.Fatalf("CM agents still track %d and %d connections", na, nb)
	}
	if q := p.a.Stats().QPs + p.b.Stats().QPs; q != qps0 {
		t.Fatalf("devices hold %d queue pairs, %d before the connections", q, qps0)
	}
	const slack = 4 << 20
	if raceEnabled {
		rss2 = rss0 // the race detector's shadow memory is not given back
	}
	if heap2 > heap0+slack || rss2-(meta2-meta0) > rss0+slack {
		t.Fatalf("after %d connections: heap %+d B, RSS %+d B (%d B of it the runtime's bookkeeping) since the start (allowed %d)",
			n, heap2-heap0, rss2-rss0, meta2-meta0, slack)
	}
}

// TestCMSendBurst: 1,000 MADs answered at once (SIDR_REQs to a port
// nobody listens on, handed to the agent faster than QP1's 64 send slots
// complete) all go out: the ones finding no free slot wait for one.
func TestCMSendBurst(t *testing.T) {
	const n = 1000
	p, _, lb := newPipeDevices(t, pipe.Config{})
	var mad [rdmacm.MADLen]byte
	for i := range n {
		req := &rdmacm.SIDRReq{RequestID: uint32(i + 1), ServiceID: rdmacm.ServiceID(rdmacm.PSUDP, 9)}
		if _, err := rdmacm.Encode(mad[:], rdmacm.CMHeader(uint64(i)), req); err != nil {
			t.Fatal(err)
		}
		if err := p.b.CMInput(addrA, mad[:]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for lb.Stats().Frames < n {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d SIDR_REPs sent", lb.Stats().Frames, n)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if st := lb.Stats(); st.Frames != n {
		t.Fatalf("%d frames sent for %d SIDR_REQs", st.Frames, n)
	}
}
