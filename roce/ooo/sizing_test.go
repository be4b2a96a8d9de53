package ooo_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/xdproce/xdproce/roce/ooo"
)

// TestOpPackets: the rule keeps (1−p)^(n+1) ≥ success with n as large as
// that allows (n+1 packets would fall short), within 1..max.
func TestOpPackets(t *testing.T) {
	for _, c := range []struct {
		loss, success float64
		max, want     int
	}{
		{0, 0.75, 256, 256}, {math.NaN(), 0.75, 256, 256}, {-1, 0.75, 256, 256},
		{0.02, 0.75, 256, 13}, {0.01, 0.75, 256, 27}, {0.05, 0.75, 256, 4}, {0.02, 0.5, 256, 33},
		{0.0001, 0.75, 256, 256}, {0.3, 0.75, 256, 1}, {1, 0.75, 256, 1}, {0.02, 0.75, 0, 1},
	} {
		if got := ooo.OpPackets(c.loss, c.success, c.max); got != c.want {
			t.Errorf("OpPackets(%v, %v, %d) = %d, want %d", c.loss, c.success, c.max, got, c.want)
		}
	}
	for p := 0.001; p < 0.2; p += 0.001 {
		for _, s := range []float64{0.5, 0.75, 0.9} {
			n := ooo.OpPackets(p, s, 1<<20)
			ok := func(n int) bool { return math.Pow(1-p, float64(n+1)) >= s }
			if n > 1 && !ok(n) || ok(n+1) {
				t.Fatalf("loss %v success %v: n = %d (meets %v, n+1 meets %v)", p, s, n, ok(n), ok(n+1))
			}
		}
	}
}

// TestLossEstimateConverges: a writer's estimate, fed with simulated
// operation outcomes at a true loss p while sizing by the rule, settles
// near p from any start; Stats shows it.
func TestLossEstimateConverges(t *testing.T) {
	for _, p := range []float64{0.01, 0.02, 0.05} {
		rng := rand.New(rand.NewPCG(1, uint64(p*1000)))
		got := ooo.SimulateEstimate(p, 0.75, 256, 2000, rng.Float64)
		if got < p/2 || got > p*2 {
			t.Errorf("true loss %v: estimate %v after 2000 operations", p, got)
		}
	}
}
