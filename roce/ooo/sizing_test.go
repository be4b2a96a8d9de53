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

// outcome simulates an operation of n packets and its completion at
// packet loss p.
func outcome(rnd *rand.Rand, p float64, n int) bool {
	ok := true
	for range n + 1 {
		if rnd.Float64() < p {
			ok = false
		}
	}
	return ok
}

// TestLossEstimate feeds the estimate synthetic outcomes at a known loss
// p: operations of one size, of sizes mixed at random from 1 to 256
// packets, and sized by the rule from the estimate itself after a start of
// 256-packet operations that all fail (what a writer does). After each
// window of operations the estimate lands near p (every one within ±50 %,
// their mean within ±10 %: the estimate is unbiased).
func TestLossEstimate(t *testing.T) {
	const windows = 20
	for _, p := range []float64{0.01, 0.02, 0.05} {
		for _, mode := range []string{"fixed", "mixed", "rule"} {
			rnd := rand.New(rand.NewPCG(uint64(p*1e4), uint64(len(mode))))
			e := ooo.NewEstimator(0)
			if mode == "rule" {
				for range 8 {
					e.Add(256, false)
				}
			}
			sum := 0.0
			for w := range windows {
				for range ooo.EstWindow {
					var n int
					switch mode {
					case "fixed":
						n = ooo.OpPackets(p, 0.75, 256)
					case "mixed":
						n = 1 + rnd.IntN(256)
					default:
						n = ooo.OpPackets(e.Loss(), 0.75, 256)
					}
					e.Add(n, outcome(rnd, p, n))
				}
				got := e.Loss()
				sum += got
				if math.Abs(got-p) > 0.5*p {
					t.Errorf("loss %v, %s sizes, window %d: estimate %.4f", p, mode, w, got)
				}
			}
			if mean := sum / windows; math.Abs(mean-p) > 0.1*p {
				t.Errorf("loss %v, %s sizes: mean estimate %.4f over %d windows", p, mode, mean, windows)
			} else {
				t.Logf("loss %v, %s sizes: mean estimate %.4f", p, mode, mean)
			}
		}
	}
}

// TestLossEstimateEdges: no outcome yet gives the start; a window of
// successes only gives 0 and of failures only 1; the oldest outcomes leave
// the window (after a window of failures, a window of successes alone).
func TestLossEstimateEdges(t *testing.T) {
	e := ooo.NewEstimator(0.03)
	if got := e.Loss(); got != 0.03 {
		t.Errorf("start: %v", got)
	}
	for range ooo.EstWindow {
		e.Add(4, false)
	}
	if got := e.Loss(); got != 1 {
		t.Errorf("failures only: %v", got)
	}
	e.Add(4, true)
	if got := e.Loss(); !(got > 0.5 && got < 1) {
		t.Errorf("one success of 5 packets among 255 failures: %v", got)
	}
	for range ooo.EstWindow {
		e.Add(9, true)
	}
	if got := e.Loss(); got != 0 {
		t.Errorf("successes only: %v", got)
	}
	// One failure of 2 packets against 99 successes of 2: q² = 0.99.
	e = ooo.NewEstimator(0)
	for i := range 100 {
		e.Add(1, i > 0)
	}
	if got, want := e.Loss(), 1-math.Sqrt(0.99); math.Abs(got-want) > 1e-9 {
		t.Errorf("1 failure in 100 operations of 2 packets: %v, want %v", got, want)
	}
	// The failure's completion came late after all: no loss left.
	if e.Amend(2) || !e.Amend(1) || e.Amend(1) {
		t.Error("Amend: want one failure of 1 packet to amend, none of 2")
	}
	if got := e.Loss(); got != 0 {
		t.Errorf("after the amendment: %v, want 0", got)
	}
	// Size 0 amends the latest failure of any size.
	e.Add(3, false)
	e.Add(5, false)
	if !e.Amend(0) || e.Loss() == 0 || !e.Amend(0) || e.Loss() != 0 || e.Amend(0) {
		t.Error("Amend(0): want the two failures amended, one at a time")
	}
}
