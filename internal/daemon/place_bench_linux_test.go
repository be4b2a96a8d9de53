package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// BenchmarkPrivilegedPlacementWrite64K: 64 KiB RDMA WRITEs between two clients of a
// daemon by direct placement (regions from PD.AllocMR, up to 32 in flight),
// alternated in rounds of 64 with a plain copy of the same 64 KiB between
// the same two buffers, in the same run. It reports both rates and their
// ratio (issue 17's target: placed/memcpy >= 0.5); nothing is asserted.
// Run it alone: flock /tmp/xdproce-bench.lock go test -run '^$' -bench
// PrivilegedPlacementWrite64K ./internal/daemon
func BenchmarkPrivilegedPlacementWrite64K(b *testing.B) {
	netlab.Privileged(b)
	const size, round, depth = 64 << 10, 64, 32
	x, y, _ := daemonClients(b)
	sa := newScriptSideMR(b, x, size, true)
	sb := newScriptSideMR(b, y, size, true)
	if err := sa.qp.Connect(1, endpoint(b, y, sb.qp, 2), nil); err != nil {
		b.Fatal(err)
	}
	if err := sb.qp.Connect(2, endpoint(b, x, sa.qp, 1), nil); err != nil {
		b.Fatal(err)
	}
	wr := roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL:        []roce.SGE{{Addr: sa.mr.Addr(), Length: size, LKey: sa.mr.LKey()}},
		RemoteAddr: sb.mr.Addr(), RKey: sb.mr.RKey()}
	wcs := make([]roce.WC, depth)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// placed writes n WRITEs, keeping up to depth in flight.
	placed := func(n int) {
		posted, done := 0, 0
		for done < n {
			for posted < n && posted-done < depth {
				if err := sa.qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				posted++
			}
			k, err := sa.cq.Wait(ctx, wcs)
			if err != nil {
				b.Fatal(err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status != roce.WCSuccess {
					b.Fatalf("completion %+v", wc)
				}
			}
			done += k
		}
	}
	placed(round) // warm up: the window opens
	var tPlace, tCopy time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for left := b.N; left > 0; left -= round {
		n := min(round, left)
		t0 := time.Now()
		placed(n)
		t1 := time.Now()
		for range n {
			copy(sb.buf, sa.buf)
		}
		tPlace += t1.Sub(t0)
		tCopy += time.Since(t1)
	}
	b.StopTimer()
	mb := float64(b.N) * size / 1e6
	if tPlace > 0 && tCopy > 0 {
		b.ReportMetric(mb/tPlace.Seconds(), "placed-MB/s")
		b.ReportMetric(mb/tCopy.Seconds(), "memcpy-MB/s")
		b.ReportMetric(tCopy.Seconds()/tPlace.Seconds(), "placed/memcpy")
	}
	if st := x.PlaceStats(); st.Requests < uint64(b.N) || st.Fallbacks != 0 {
		b.Fatalf("placement stats %+v after %d writes", st, b.N)
	}
}
