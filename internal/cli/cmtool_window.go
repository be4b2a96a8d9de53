package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// inWindow runs n steps: prep(ctx, i) in order, each returning the slow
// part (a CM exchange), which runs on its own goroutine with at most
// cmatoseWindow running at once. The first error (of a prep or an
// exchange) cancels the rest; inWindow returns it once every exchange
// started has ended.
func inWindow(ctx context.Context, n int, prep func(ctx context.Context, i int) (func(context.Context) error, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		slots = make(chan struct{}, cmatoseWindow)
	)
	fail := func(err error) {
		once.Do(func() { first = err; cancel() })
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		run, err := prep(ctx, i)
		if err != nil {
			<-slots
			fail(err)
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := run(ctx); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// cmatoseStats is what `ucmatose --stats` prints to stderr at the end: how
// long the connections took to set up, carry the data and tear down, the
// resident set and Go heap at the start, with every connection up and
// after the teardown, and what the CM agent and the device still hold.
type cmatoseStats struct {
	w                          io.Writer
	t0, up, data               time.Time
	rss0, rssUp, heap0, heapUp int64
}

func heapBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func (s *cmatoseStats) start() {
	if s != nil {
		s.rss0, s.heap0, s.t0 = residentBytes(), heapBytes(), time.Now()
	}
}

func (s *cmatoseStats) established() {
	if s != nil {
		s.up = time.Now()
		s.rssUp, s.heapUp = residentBytes(), heapBytes()
	}
}

func (s *cmatoseStats) transferred() {
	if s != nil {
		s.data = time.Now()
	}
}

// destroyed prints the figures once the queue pairs of n connections are
// destroyed and their protection domain freed (pdErr: how that failed; a
// run that failed before its connections were up prints nothing).
func (s *cmatoseStats) destroyed(dev *roce.Device, n int, pdErr error) {
	if s == nil || s.up.IsZero() || s.data.IsZero() {
		return
	}
	end := time.Now()
	heap := heapBytes()
	debug.FreeOSMemory() // what the runtime keeps but does not use is not the connections'
	rss := residentBytes()
	cs, ds := dev.CMStats(), dev.Stats()
	up := s.up.Sub(s.t0)
	fmt.Fprintf(s.w, "ucmatose: %d connections established in %v (%.0f connections/s), data in %v, torn down in %v\n",
		n, up.Round(time.Millisecond), float64(n)/up.Seconds(), s.data.Sub(s.up).Round(time.Millisecond), end.Sub(s.data).Round(time.Millisecond))
	fmt.Fprintf(s.w, "ucmatose: RSS %d → %d → %d KiB (%.0f B per connection), heap %d → %d → %d KiB (%.0f B per connection)\n",
		s.rss0>>10, s.rssUp>>10, rss>>10, float64(s.rssUp-s.rss0)/float64(n), s.heap0>>10, s.heapUp>>10, heap>>10, float64(s.heapUp-s.heap0)/float64(n))
	pd := "freed"
	if pdErr != nil {
		pd = pdErr.Error()
	}
	fmt.Fprintf(s.w, "ucmatose: left: %d CM connections, %d queue pairs (QP1 included); protection domain %s; MADs sent %d, resent %d, received %d; frames dropped: %d to unknown QPNs, %d by queue pairs, %d malformed, %d without a transmit buffer\n",
		cs.Conns, ds.QPs, pd, cs.Sent, cs.Resent, cs.Received, ds.DropUnknownQPN, ds.QPDropped, ds.DropMalformed, ds.TxNoBuffer)
}
