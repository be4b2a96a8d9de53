package qp

import (
	"math"
	"testing"
)

// ccEvent is one step of a DCQCN timeline: at (ns after the start) a CNP
// arrives, or bytes are sent, then the rate is looked at.
type ccEvent struct {
	at    int64
	cnp   bool
	bytes int
	// The expected state after it: the current rate in units of the
	// measured rate R (0: not checked), paced or not, whether a CNP cut.
	rc      float64
	limited bool
	cut     bool
}

func near(a, b float64) bool { return math.Abs(a-b) <= 2e-3*math.Max(math.Abs(a), math.Abs(b)) }

// TestDCQCNTimeline drives the reaction point alone on a fake clock: a flow
// measured at R (1 GB/s) gets CNPs and recovers in DCQCN's stages.
func TestDCQCNTimeline(t *testing.T) {
	const R = 1e9 // bytes/s
	p := DefaultDCQCN
	p.ByteReset = 1 << 40 // timer events only, unless a case says otherwise
	us := int64(1000)
	for _, tc := range []struct {
		name   string
		params func(*DCQCNParams)
		events []ccEvent
	}{
		{name: "first CNP halves, fast recovery then additive back to the measured rate", events: []ccEvent{
			{at: 0, cnp: true, rc: 0.5, limited: true, cut: true},
			{at: 2 * us, cnp: true, rc: 0.5, limited: true, cut: false}, // within the reduce period
			{at: 299 * us, rc: 0.5, limited: true},
			{at: 300 * us, rc: 0.75, limited: true},  // fast recovery: halfway to the target
			{at: 600 * us, rc: 0.875, limited: true}, // additive: the target is capped at R
			{at: 900 * us, rc: 0.9375, limited: true},
			{at: 2700 * us, rc: 1, limited: false}, // within 0.1 % of R: unpaced
		}},
		{name: "RPG_MIN_DEC_FAC caps the cut", params: func(p *DCQCNParams) { p.MinDecFac = 20 }, events: []ccEvent{
			{at: 0, cnp: true, rc: 0.8, limited: true, cut: true},
		}},
		{name: "cuts compound, never below the minimum rate", params: func(p *DCQCNParams) { p.MinRate = 2_000_000_000 }, events: []ccEvent{
			{at: 0, cnp: true, rc: 0.5, limited: true, cut: true},
			{at: 10 * us, cnp: true, rc: 0.2502, limited: true, cut: true}, // α stays near 1: cut by α/2
			{at: 20 * us, cnp: true, rc: 0.25, limited: true, cut: true},   // 2 Gb/s = 0.25 GB/s floor
		}},
		{name: "hyper increase once both counters passed the threshold", params: func(p *DCQCNParams) {
			p.ByteReset = 1 << 20
			p.MaxRate = 16_000_000_000 // 2 R: the target may grow past R
		}, events: []ccEvent{
			{at: 0, cnp: true, rc: 0.5, limited: true, cut: true},
			{at: 300 * us, rc: 0.75, limited: true},                    // timer: fast recovery (rt R)
			{at: 301 * us, bytes: 1 << 20, rc: 0.87531, limited: true}, // bytes: additive, rt R+AI (0.000625 R)
			{at: 302 * us, bytes: 1 << 20, rc: 0.94109, limited: true}, // both ≥ 1: hyper, rt += HAI (0.00625 R)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pp := p
			if tc.params != nil {
				tc.params(&pp)
			}
			var d dcqcn
			const start = 1_000_000_000
			d.init(pp, start-10_000_000)
			d.sent(int(R/100), start) // 10 ms at R: measured R
			for i, ev := range tc.events {
				now := start + ev.at
				d.tick(now)
				if ev.bytes > 0 {
					d.sent(ev.bytes, now)
				}
				if ev.cnp {
					if got := d.cnp(now); got != ev.cut {
						t.Fatalf("event %d: cnp cut %v, want %v", i, got, ev.cut)
					}
				}
				rc, lim := d.rate()
				if lim != ev.limited || ev.rc != 0 && !near(rc/R, ev.rc) {
					t.Fatalf("event %d at %d µs: rate %.4f R limited %v, want %.4f R limited %v (rt %.4f R, α %.4f)",
						i, ev.at/us, rc/R, lim, ev.rc, ev.limited, d.rt/R, d.alpha)
				}
			}
		})
	}
}

// TestDCQCNAlpha checks α's update: +g per CNP, ×(1−g) per AlphaPeriod
// without one, counted from the clock however late it is looked at.
func TestDCQCNAlpha(t *testing.T) {
	var d dcqcn
	d.init(DCQCNParams{}, 0)
	g := 1 - 1019.0/1024
	want := 1023.0 / 1024
	if !near(d.alpha, want) {
		t.Fatalf("initial α %v, want %v", d.alpha, want)
	}
	d.sent(1<<20, 1_000_000)
	d.cnp(1_000_000)
	want = (1-g)*want + g
	if !near(d.alpha, want) {
		t.Fatalf("α after a CNP %v, want %v", d.alpha, want)
	}
	// 10 periods later, with no CNP between: decayed 10 times, then the
	// CNP's update.
	at := 1_000_000 + 10*DefaultDCQCN.AlphaPeriod
	d.cnp(at)
	want = (1-g)*(want*math.Pow(1-g, 10)) + g
	if !near(d.alpha, want) {
		t.Fatalf("α after 10 quiet periods and a CNP %v, want %v", d.alpha, want)
	}
	// A smaller α cuts less: the cut is α/2.
	rc := d.rc
	d.cnp(at + DefaultDCQCN.AlphaPeriod*100)
	if cut := 1 - d.rc/rc; cut >= 0.5 || cut <= 0 {
		t.Fatalf("cut %v after α decayed, want in (0, 0.5)", cut)
	}
}

// TestDCQCNParamsCheck refuses parameters out of range.
func TestDCQCNParamsCheck(t *testing.T) {
	for _, p := range []DCQCNParams{{MinDecFac: 101}, {G: 2000}, {TimeReset: -1}, {CNPDSCP: 64}, {MaxRate: 10}} {
		if err := p.check(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if err := DefaultDCQCN.check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestPacerRate sends as fast as the pacer allows on a fake clock that
// advances 50 µs per round (coarser than a frame time) and checks the
// achieved rate is the DCQCN rate, and that the pacer never asks to wake
// before it would allow a frame.
func TestPacerRate(t *testing.T) {
	var p pacer
	p.enable(true, DCQCNParams{TimeReset: 1 << 50, ByteReset: 1 << 50}, 0) // the rate stays where the CNP put it
	now := int64(1_000_000)
	p.charge(4096, now)
	now += 10_000_000
	p.charge(1<<20, now) // measured ≈ 100 MB/s
	p.cnp(now)
	r, limited := p.cc.rate()
	if want := float64(1<<20) * 1e9 / 10e6 / 2; !limited || !near(r, want) {
		t.Fatalf("after a CNP: rate %.4g limited %v, want %.4g (half the measured) limited", r, limited, want)
	}
	start, sent := now, 0
	for range 2000 { // 100 ms
		now += 50_000
		for k := 0; p.allow(now); k++ {
			if k > 1000 {
				t.Fatal("the pacer never refuses")
			}
			p.charge(4096, now)
			sent += 4096
		}
		if rel := p.release(); rel <= now {
			t.Fatalf("release %d not after now %d while refused", rel, now)
		}
	}
	got := float64(sent) * 1e9 / float64(now-start)
	if got < r*0.97 || got > r*1.03 {
		t.Fatalf("achieved %.4g B/s, want %.4g ± 3 %%", got, r)
	}
}
