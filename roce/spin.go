package roce

import "time"

// BusyPollAuto, as Options.BusyPoll, makes the engine spin adaptively while
// traffic flows in small rounds (a request, a SEND, an ACK: at most
// autoSmallRound frames sent): after such a round it polls the link instead
// of sleeping for about twice the recent gap between active rounds (in a
// ping-pong, the peer's turnaround), at most maxAutoSpin. A round that sent
// more (a bulk sender, which the ACKs of its window wake) or that napped
// (Options.RxCoalesce) starts no spin, so a transfer loses nothing to it.
// After two spins in a row that ran out with nothing to do it stops spinning
// until activity again follows within maxAutoSpin, probing with one spin in
// every autoProbe active rounds meanwhile (two sleeping ends answer each
// other slower than maxAutoSpin, and on two cores a spin takes a core from
// the peer). A spin whose polls come more than autoPreempted apart shows the
// thread losing its CPU to others: spinning then only delays them, so it
// stops at once and sits out the next autoProbe active rounds, twice as many
// each time this repeats (up to maxHold), until a spin runs undisturbed.
const BusyPollAuto time.Duration = -1

const (
	maxAutoSpin    = 150 * time.Microsecond // longest adaptive spin
	autoMargin     = 10 * time.Microsecond  // added to twice the gap
	autoMisses     = 2                      // fruitless spins before it stops
	autoProbe      = 8                      // active rounds per probe spin when stopped
	autoSmallRound = 4                      // most frames sent by a round that starts a spin
	autoPreempted  = 20 * time.Microsecond  // a poll this long after the last: the CPU is taken
	maxHold        = 4096                   // most active rounds sat out after preemptions
)

// A spinner decides whether the engine polls again rather than sleeping.
// Owned by the progress goroutine.
type spinner struct {
	fixed  int64 // Options.BusyPoll > 0: spin this long after activity
	auto   bool
	gap    int64 // auto: moving average of gaps between active rounds (capped), ns; 0 unknown
	last   int64 // auto: the last active round; 0 when none
	bulk   bool  // auto: the last active round sent many frames
	missed bool  // auto: the spin after last ran out
	misses int   // auto: spins in a row that ran out
	rounds int   // auto: active rounds since it stopped spinning
	polled int64 // auto: the last poll of the current spin; 0 when not spinning
	hold   int   // auto: active rounds left without spinning after a preemption
	holdN  int   // auto: the length of the last hold
}

func newSpinner(busy time.Duration) spinner {
	if busy < 0 {
		return spinner{auto: true}
	}
	return spinner{fixed: int64(busy)}
}

// round records a round at now that received n frames and sent sent.
func (s *spinner) round(now int64, n int, sent uint64) {
	if !s.auto || n == 0 && sent == 0 {
		return
	}
	if s.last != 0 {
		g := min(now-s.last, int64(maxAutoSpin))
		if s.gap == 0 {
			s.gap = g
		} else {
			s.gap += (g - s.gap) / 8
		}
		if g < int64(maxAutoSpin) {
			s.misses = 0 // spinning would have caught it
		}
	}
	s.last, s.bulk, s.missed, s.polled = now, sent > autoSmallRound, false, 0
	if s.misses >= autoMisses {
		s.rounds++
	}
	if s.hold > 0 {
		s.hold--
	}
}

// spin says whether to poll again at now, the last active round (of any
// kind, doorbells included) at active.
func (s *spinner) spin(now, active int64) bool {
	if s.fixed > 0 {
		return now-active < s.fixed
	}
	if !s.auto || s.last == 0 || s.hold > 0 || s.bulk || s.missed || s.misses >= autoMisses && s.rounds%autoProbe != 0 {
		return false
	}
	budget := int64(maxAutoSpin) // until a gap is known
	if s.gap != 0 {
		budget = min(2*s.gap+int64(autoMargin), budget)
	}
	preempted := s.polled != 0 && now-s.polled > int64(autoPreempted)
	if now-s.last < budget && !preempted {
		s.polled = now
		return true
	}
	s.missed, s.polled = true, 0
	s.misses++
	if preempted {
		s.holdN = min(max(2*s.holdN, autoProbe), maxHold)
		s.hold = s.holdN
	} else {
		s.holdN = 0
	}
	return false
}
