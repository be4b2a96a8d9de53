package netlab_test

import (
	"flag"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
)

var long = flag.Bool("long", false, "run the long variants (the relay's ceiling)")

// xskBlast sends 1514-byte RoCE-port frames from A to B through topo's relay
// by AF_XDP for d, at offer bits/s (on a schedule checked per batch) or, with
// offer 0, as fast as A's socket takes them, and returns the bits per second
// the relay forwarded toward B, measured after the first 300 ms.
func xskBlast(t *testing.T, topo *netlab.Topo, offer float64, d time.Duration) float64 {
	t.Helper()
	a, b := xskEnd(t, topo.A), xskEnd(t, topo.B)
	bufs, rx := make([][]byte, 64), make([][]byte, 64)
	start := time.Now()
	var s0 netlab.RelayStats
	var t0 time.Time
	var seq uint32
	for time.Since(start) < d {
		if t0.IsZero() && time.Since(start) > 300*time.Millisecond {
			s0, t0 = topo.Relay.Stats(), time.Now()
		}
		want := len(bufs)
		if offer > 0 {
			want = min(want, int(time.Since(start).Seconds()*offer/8/1514)-int(seq))
			if want <= 0 {
				time.Sleep(200 * time.Microsecond)
				continue
			}
		}
		k := a.Alloc(bufs[:want])
		for i := range k {
			bufs[i] = roceFrame(bufs[i], topo.A, topo.B, seq, 1514)
			seq++
		}
		if err := a.Send(bufs[:k]); err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			a.Wait(time.Millisecond)
		}
		if _, err := b.Receive(rx); err != nil { // keep B's ring draining
			t.Fatal(err)
		}
	}
	s1, t1 := topo.Relay.Stats(), time.Now()
	bytes := s1.ForwardedBytes - s0.ForwardedBytes
	if s1.Bottleneck.Bytes > 0 {
		bytes = s1.Bottleneck.Bytes - s0.Bottleneck.Bytes
	}
	return float64(bytes) * 8 / t1.Sub(t0).Seconds()
}

// The relay's own ceiling: an AF_XDP blast through an unlimited relay, then
// through bottlenecks at 50 % and 90 % of what it reached, offered 1.5× their
// rate, which they must hold within 10 %. Behind -long: it takes ~8 s of both
// cores and depends on the machine's load.
func TestPrivilegedRelayCeiling(t *testing.T) {
	if !*long {
		t.Skip("the relay's ceiling runs with -long")
	}
	ceiling := xskBlast(t, netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{}), 0, 2*time.Second)
	t.Logf("unlimited relay: %.0f Mbit/s of 1514-byte frames", ceiling/1e6)
	for _, share := range []float64{0.5, 0.9} {
		rate := ceiling * share
		topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Bottleneck: netlab.Bottleneck{Rate: int64(rate), Queue: 512}})
		got := xskBlast(t, topo, 1.5*rate, 2*time.Second)
		t.Logf("bottleneck at %.0f %% (%.0f Mbit/s): %.0f Mbit/s; %+v", share*100, rate/1e6, got/1e6, topo.Relay.Stats().Bottleneck)
		if got < rate*0.9 || got > rate*1.1 {
			t.Errorf("bottleneck at %.0f Mbit/s forwarded %.0f Mbit/s", rate/1e6, got/1e6)
		}
		topo.Close()
	}
}
