package roce

import (
	"testing"
	"time"
)

const us = int64(time.Microsecond)

func TestSpinnerOffAndFixed(t *testing.T) {
	off := newSpinner(0)
	off.round(1000*us, 1, 1)
	if off.spin(1000*us, 1000*us) {
		t.Error("BusyPoll 0 spins")
	}
	fixed := newSpinner(50 * time.Microsecond)
	if !fixed.spin(1040*us, 1000*us) || fixed.spin(1051*us, 1000*us) {
		t.Error("BusyPoll 50us does not spin exactly 50 µs after activity")
	}
}

func TestSpinnerAutoLearnsGap(t *testing.T) {
	s := newSpinner(BusyPollAuto)
	now := 1000 * us
	// Replies 20 µs after each request: the spin after a request covers
	// twice that plus the margin, and no more.
	for range 20 {
		s.round(now, 0, 1)
		s.round(now+20*us, 1, 0)
		now += 100 * us
	}
	s.round(now, 0, 1)
	if !s.spin(now+45*us, now) {
		t.Errorf("gap %v: no spin 45 µs after a request", time.Duration(s.gap))
	}
	if s.spin(now+2*20*us+int64(autoMargin)+us, now) {
		t.Errorf("gap %v: spins past twice the gap plus the margin", time.Duration(s.gap))
	}
	// A bulk round (many frames) starts no spin.
	b := newSpinner(BusyPollAuto)
	b.gap = 20 * us
	b.round(now, 0, autoSmallRound+1)
	if b.spin(now+int64(autoFlowSpin)+us, now) {
		t.Error("spins after a bulk send round")
	}
}

func TestSpinnerAutoStopsWhenNothingComes(t *testing.T) {
	s := newSpinner(BusyPollAuto)
	s.gap = 20 * us
	now := 1000 * us
	spun := 0
	for range 8 * autoProbe {
		s.round(now, 0, 1)
		if s.spin(now+int64(autoFlowSpin)+us, now) {
			spun++
		}
		s.spin(now+int64(maxAutoSpin), now) // runs out: a miss
		s.round(now+10*int64(maxAutoSpin), 1, 0)
		now += 20 * int64(maxAutoSpin)
	}
	// Two misses stop it; then one probe every autoProbe rounds.
	if want := autoMisses + 8; spun > want+1 { // 8 probes in 8*autoProbe rounds
		t.Errorf("spun after %d of %d requests nobody answered in time, want about %d", spun, 8*autoProbe, want)
	}
	// A reply within maxAutoSpin turns it back on.
	s.round(now, 0, 1)
	s.round(now+10*us, 1, 0)
	s.round(now+100*us, 0, 1)
	if !s.spin(now+100*us+int64(autoFlowSpin)+us, now+100*us) {
		t.Error("a quick reply did not turn spinning back on")
	}
}
