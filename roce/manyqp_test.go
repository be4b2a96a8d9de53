package roce_test

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestManyQPs opens 10,000 RC queue pairs on one device (100,000 with
// -long, 1,000 with -short), connects each (RTS, no traffic), destroys them
// all, and checks that memory comes back: the heap in use after a GC and
// the resident set after debug.FreeOSMemory end within 4 MiB of where they
// started (the resident set less the growth of the runtime's heap
// bookkeeping, about 2 % of the largest heap, which Go keeps). An idle queue
// pair with the default limits must cost at most 8 KiB of heap (its rings
// are not preallocated). It logs what an open queue pair costs.
func TestManyQPs(t *testing.T) {
	n := 10_000
	switch {
	case *long:
		n = 100_000
	case testing.Short():
		n = 1_000
	}
	la, _, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := roce.NewDevice(la, &roce.Options{MaxQPs: n, Addrs: []netip.Addr{addrA}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	pd := d.AllocPD()
	peer := netip.AddrFrom16(addrB.As16())

	heap0, rss0, meta0 := memNow(t)
	start := time.Now()
	qps := make([]*roce.QP, n)
	for i := range qps {
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatalf("queue pair %d: %v", i, err)
		}
		if err := q.Connect(uint32(i), roce.Endpoint{QPN: 0x100000 + uint32(i), PSN: uint32(i), GID: peer}, nil); err != nil {
			t.Fatalf("queue pair %d: connect: %v", i, err)
		}
		qps[i] = q
	}
	heap1, rss1, _ := memNow(t)
	opened := time.Since(start)
	// Destroy waits for the engine to flush the queue pair: destroy from
	// several goroutines so that the waits overlap.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				if err := qps[i].Destroy(); err != nil {
					errs <- fmt.Errorf("queue pair %d: destroy: %w", i, err)
				}
				qps[i] = nil
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	heap2, rss2, meta2 := memNow(t)
	t.Logf("%d RC queue pairs (RTS, idle, default MaxSendWR/MaxRecvWR %d): %.0f B heap and %.0f B RSS each; opened in %v, all destroyed in %v",
		n, roce.DefaultMaxWR, float64(heap1-heap0)/float64(n), float64(rss1-rss0)/float64(n), opened, time.Since(start)-opened)
	t.Logf("heap in use %d → %d → %d B, RSS %d → %d → %d B, of which the runtime's heap bookkeeping grew %d B",
		heap0, heap1, heap2, rss0, rss1, rss2, meta2-meta0)
	if per := (heap1 - heap0) / int64(n); per > 8<<10 {
		t.Errorf("an idle queue pair costs %d B of heap, want at most 8 KiB", per)
	}
	const slack = 4 << 20
	if raceEnabled {
		rss2 = rss0 // the race detector's shadow memory is not given back
	}
	if heap2 > heap0+slack || rss2-(meta2-meta0) > rss0+slack {
		t.Fatalf("after destroying %d queue pairs: heap %+d B, RSS %+d B (%d B of it the runtime's bookkeeping) since the start (allowed %d)",
			n, heap2-heap0, rss2-rss0, meta2-meta0, slack)
	}
	if st := d.Stats(); st.QPs != 0 {
		t.Fatalf("device still counts %d queue pairs", st.QPs)
	}
}

// memNow returns the heap in use after a GC, the resident set after
// debug.FreeOSMemory, and the runtime's own bookkeeping of the heap (span
// structures, GC metadata), which grows with the largest heap the process
// had and which the Go runtime never gives back.
func memNow(t *testing.T) (heap, rss, meta int64) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(ms.HeapInuse), kb * 1024, int64(ms.MSpanSys + ms.GCSys + ms.OtherSys)
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0, 0, 0
}
