package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// BenchmarkPrivilegedPlacementWrite64K: 64 KiB RDMA WRITEs between two
// clients of a daemon by direct placement (regions from PD.AllocMR, up to
// 64 in flight: the default send window), alternated in rounds of 128 with
// the same WRITEs placed the old way (the responder's region registered
// with RemoteInvalidate, so the daemon holds no rkey for it and asks the
// responder about every message: four port hops, not two), with the same
// WRITEs between ordinary memory (frames switched by the daemon) and with
// a plain copy between the placed WRITEs' two buffers, in the same run. It
// reports the rates and the ratios (issue 17's target: placed/memcpy >=
// 0.5); nothing is asserted.
// Run it alone: flock /tmp/xdproce-bench.lock go test -run '^$' -bench
// PrivilegedPlacementWrite64K ./internal/daemon
func BenchmarkPrivilegedPlacementWrite64K(b *testing.B) {
	netlab.Privileged(b)
	const size, round, depth = 64 << 10, 128, 64
	x, y, d := daemonClients(b)
	pwr, pa, pb := writePair(b, x, y, size, true, benchAccess)
	iwr, ia, _ := writePair(b, x, y, size, true, benchAccess|roce.RemoteInvalidate)
	swr, sa, _ := writePair(b, x, y, size, false, benchAccess)
	wcs := make([]roce.WC, depth)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	write := func(s *scriptSide, wr roce.SendWR, n int) { benchWrite(ctx, b, s, wr, n, wcs) }
	write(pa, pwr, round) // warm up: the windows open
	write(ia, iwr, round)
	write(sa, swr, round)
	g0 := d.Stats().PlaceGranted
	var tPlace, tInd, tSwitch, tCopy time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for left := b.N; left > 0; left -= round {
		n := min(round, left)
		t0 := time.Now()
		write(pa, pwr, n)
		t1 := time.Now()
		write(ia, iwr, n)
		t2 := time.Now()
		write(sa, swr, n)
		t3 := time.Now()
		for range n {
			copy(pb.buf, pa.buf)
		}
		tPlace += t1.Sub(t0)
		tInd += t2.Sub(t1)
		tSwitch += t3.Sub(t2)
		tCopy += time.Since(t3)
	}
	b.StopTimer()
	mb := float64(b.N) * size / 1e6
	if tPlace > 0 && tCopy > 0 && tSwitch > 0 && tInd > 0 {
		b.ReportMetric(mb/tPlace.Seconds(), "placed-MB/s")
		b.ReportMetric(mb/tInd.Seconds(), "4hop-MB/s")
		b.ReportMetric(mb/tSwitch.Seconds(), "switched-MB/s")
		b.ReportMetric(mb/tCopy.Seconds(), "memcpy-MB/s")
		b.ReportMetric(tCopy.Seconds()/tPlace.Seconds(), "placed/memcpy")
		b.ReportMetric(tInd.Seconds()/tPlace.Seconds(), "placed/4hop")
		b.ReportMetric(tSwitch.Seconds()/tPlace.Seconds(), "placed/switched")
	}
	if st := x.PlaceStats(); st.Requests < uint64(2*b.N) || st.Fallbacks != 0 {
		b.Fatalf("placement stats %+v after %d writes each way", st, b.N)
	}
	// Placed on the first hop: all but those after a resend (the responder
	// answers it and grants again); reported, not asserted.
	g := d.Stats().PlaceGranted - g0
	if g > uint64(b.N) {
		b.Fatalf("%d of %d placed WRITEs on the first hop", g, b.N)
	}
	b.ReportMetric(float64(g)/float64(b.N), "first-hop/op")
}
