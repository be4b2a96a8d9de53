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
	if s.spin(now, now) {
		t.Error("spins before any traffic")
	}
	// Activity every 20 µs: the spin after a round covers twice that plus
	// the margin, and no more.
	for range 40 {
		s.round(now, 1, 1)
		now += 20 * us
	}
	s.round(now, 1, 1)
	if !s.spin(now+45*us, now) {
		t.Errorf("gap %v: no spin 45 µs after a round", time.Duration(s.gap))
	}
	if s.spin(now+2*20*us+int64(autoMargin)+us, now) {
		t.Errorf("gap %v: spins past twice the gap plus the margin", time.Duration(s.gap))
	}
	// A bulk round (many frames sent) starts no spin.
	s.round(now+20*us, 0, autoSmallRound+1)
	if s.spin(now+21*us, now) {
		t.Error("spins after a bulk send round")
	}
}

func TestSpinnerAutoStopsWhenNothingComes(t *testing.T) {
	s := newSpinner(BusyPollAuto)
	s.gap = 20 * us
	now := 1000 * us
	const rounds = 8 * autoProbe
	spun := 0
	for range rounds {
		s.round(now, 1, 1)
		if s.spin(now+us, now) {
			spun++
			at := now + us
			for s.spin(at, now) { // polls 5 µs apart until it gives up
				if at += 5 * us; at > now+int64(maxAutoSpin)+5*us {
					t.Fatal("spins past maxAutoSpin")
				}
			}
		}
		now += 10 * int64(maxAutoSpin) // nothing for long
	}
	// Two misses stop it; then one probe every autoProbe rounds.
	if want := autoMisses + rounds/autoProbe; spun > want {
		t.Errorf("spun after %d of %d rounds nothing followed in time, want at most %d", spun, rounds, want)
	}
	// Activity soon after a round turns it back on.
	s.round(now, 1, 1)
	s.round(now+10*us, 1, 1)
	s.round(now+20*us, 1, 1)
	if !s.spin(now+21*us, now+20*us) {
		t.Error("quick activity did not turn spinning back on")
	}
}

func TestSpinnerAutoStopsWhenPreempted(t *testing.T) {
	s := newSpinner(BusyPollAuto)
	s.gap = 50 * us
	now := 1000 * us
	s.round(now, 1, 1)
	if !s.spin(now+us, now) || !s.spin(now+2*us, now) {
		t.Fatal("no spin within the budget")
	}
	// The next poll comes late: the thread lost its CPU.
	if s.spin(now+2*us+int64(autoPreempted)+us, now) {
		t.Fatal("spins on after being preempted")
	}
	s.round(now+100*us, 1, 1)
	if s.spin(now+101*us, now+100*us) {
		t.Error("spins again right after being preempted")
	}
}
