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
// pair beyond QP1, and the heap and RSS are back to where they were after
// a first round of 128 (rxe is reported to stop answering after about
// 1,000). The rate and the memory are logged, not asserted.
func TestCMManyConnections(t *testing.T) {
	n := 1_000
	switch {
	case *long:
		n = 10_000
	case testing.Short():
		n = 200
	}
	p, _, _ := newPipeDevices(t, pipe.Config{})
	s := newCMScale(t, n, p, addrB)
	p.a.CMConns() // creates a's QP1 (b's came with the listener)
	qps0 := p.a.Stats().QPs + p.b.Stats().QPs
	s.round(min(n, 2*cmScaleWorkers), nil) // the first use of everything: worker stacks, rings, pools
	heap0, rss0, meta0 := memNow(t)
	var heap1, rss1 int64
	established, closed := s.round(n, func() {
		heap1, rss1, _ = memNow(t)
	})
	heap2, rss2, meta2 := memNow(t)
	t.Logf("%d RDMA CM connections over link/pipe, %d at a time: established in %v (%.0f connections/s), all %d held at once, disconnected and destroyed in %v (%.0f/s)",
		n, cmScaleWorkers, established.Round(time.Millisecond), float64(n)/established.Seconds(), n, closed.Round(time.Millisecond), float64(n)/closed.Seconds())
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

// cmScaleWorkers is how many dials and accepts run at once: as many as
// QP1 has send slots, so that answers wait for slots.
const cmScaleWorkers = 64

// cmScale is two devices, a listener on b (at dst) and cmScaleWorkers
// goroutines accepting on it (until the test ends), for rounds of up to
// max connections.
type cmScale struct {
	t    *testing.T
	p    *devPair
	dst  netip.Addr
	ctx  context.Context
	ends [2]struct {
		cq *roce.CQ
		pd *roce.PD
	}
	passive chan cmScaleConn
	errs    chan error
}

type cmScaleConn struct {
	k  *roce.CMConn
	qp *roce.QP
}

func newCMScale(t *testing.T, max int, p *devPair, dst netip.Addr) *cmScale {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	s := &cmScale{t: t, p: p, dst: dst, ctx: ctx, passive: make(chan cmScaleConn, max), errs: make(chan error, 2*max)}
	l, err := s.p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		l.Close()
		wg.Wait()
	})
	for i, d := range []*roce.Device{s.p.a, s.p.b} {
		if s.ends[i].cq, err = d.CreateCQ(16); err != nil {
			t.Fatal(err)
		}
		s.ends[i].pd = d.AllocPD()
	}
	// The passive side: accept every request with a new queue pair.
	for range cmScaleWorkers {
		wg.Go(func() {
			for {
				r, err := l.Accept(ctx)
				if err != nil {
					return // the test ends
				}
				q, err := s.qp(1)
				if err != nil {
					s.errs <- err
					r.Reject(nil)
					continue
				}
				k, err := r.Accept(ctx, q, nil)
				if err != nil {
					s.errs <- fmt.Errorf("accept: %w", err)
				}
				s.passive <- cmScaleConn{k, q}
			}
		})
	}
	return s
}

func (s *cmScale) qp(i int) (*roce.QP, error) {
	return s.ends[i].pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: s.ends[i].cq, RecvCQ: s.ends[i].cq})
}

// workers runs f(i) for i in [0, n) on cmScaleWorkers goroutines.
func workers(n int, f func(i int) bool) {
	var wg sync.WaitGroup
	for w := range cmScaleWorkers {
		wg.Go(func() {
			for i := w; i < n && f(i); i += cmScaleWorkers {
			}
		})
	}
	wg.Wait()
}

// round establishes n connections, checks them, calls up (if not nil)
// with all of them held, and tears them down: the active side disconnects,
// then each side destroys its queue pairs (the passive side's once the
// DREQ reached them). It returns how long each half took.
func (s *cmScale) round(n int, up func()) (established, closed time.Duration) {
	t, p := s.t, s.p
	active := make([]cmScaleConn, n)
	start := time.Now()
	workers(n, func(i int) bool {
		q, err := s.qp(0)
		if err == nil {
			active[i].qp = q
			active[i].k, err = p.a.DialCM(s.ctx, q, netip.AddrPortFrom(s.dst, 7174), nil, &shortCM)
		}
		if err != nil {
			s.errs <- fmt.Errorf("dial %d: %w", i, err)
		}
		return err == nil
	})
	established = time.Since(start)
	pass := make([]cmScaleConn, 0, n)
	for len(pass) < n && len(s.errs) == 0 {
		select {
		case c := <-s.passive:
			pass = append(pass, c)
		case <-s.ctx.Done():
			t.Fatalf("%d of %d connections accepted", len(pass), n)
		}
	}
	if len(s.errs) > 0 {
		t.Fatal(<-s.errs)
	}
	for _, c := range append(active, pass...) {
		if st := c.qp.State(); st != roce.StateRTS {
			t.Fatalf("queue pair %#x in %v with every connection up", c.qp.QPN(), st)
		}
	}
	if na, nb := p.a.CMConns(), p.b.CMConns(); na != n || nb != n {
		t.Fatalf("CM agents track %d and %d connections, want %d each", na, nb, n)
	}
	if up != nil {
		up()
	}
	start = time.Now()
	workers(n, func(i int) bool {
		if err := active[i].k.Disconnect(s.ctx); err != nil {
			s.errs <- fmt.Errorf("disconnect %d: %w", i, err)
		}
		return true
	})
	workers(n, func(i int) bool {
		select {
		case <-pass[i].k.Done():
		case <-s.ctx.Done():
			s.errs <- fmt.Errorf("passive connection %d not ended", i)
			return false
		}
		for _, q := range []*roce.QP{active[i].qp, pass[i].qp} {
			if st := q.State(); st != roce.StateError {
				s.errs <- fmt.Errorf("queue pair %#x in %v after the disconnect", q.QPN(), st)
			}
			if err := q.Destroy(); err != nil {
				s.errs <- err
			}
		}
		return true
	})
	closed = time.Since(start)
	if len(s.errs) > 0 {
		t.Fatal(<-s.errs)
	}
	return established, closed
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
