package roce

import "time"

// BusyPollAuto, as Options.BusyPoll, makes the engine spin adaptively: after
// a round that sent frames it polls the link instead of sleeping for about
// twice the recent send-to-receive gap (a request's round trip as this end
// sees it), at most maxAutoSpin. Only rounds that sent a few frames
// (autoSmallRound: a request, a SEND, an ACK) count: a bulk sender keeps
// sleeping, so spinning costs a transfer nothing. After two spins in a row
// that ended with nothing received it stops spinning after sends until a
// reply again comes within maxAutoSpin of its request, probing with one spin
// in every autoProbe send rounds meanwhile (two sleeping ends answer each
// other slower than maxAutoSpin). After any active round, it polls briefly
// (autoFlowSpin) for the next frame of a flow.
const BusyPollAuto time.Duration = -1

const (
	maxAutoSpin    = 150 * time.Microsecond // longest adaptive spin
	autoFlowSpin   = 5 * time.Microsecond   // spin after any activity
	autoMargin     = 10 * time.Microsecond  // added to twice the gap
	autoMisses     = 2                      // fruitless spins before it stops
	autoProbe      = 8                      // send rounds per probe spin when stopped
	autoSmallRound = 4                      // most frames a send round that starts a spin sent
)

// A spinner decides whether the engine polls again rather than sleeping.
// Owned by the progress goroutine.
type spinner struct {
	fixed  int64 // Options.BusyPoll > 0: spin this long after activity
	auto   bool
	gap    int64 // auto: moving average of send-to-receive gaps (capped), ns
	sentAt int64 // auto: when the oldest unanswered send round went out; 0 when none
	missed bool  // auto: the spin for sentAt ran out
	misses int   // auto: spins in a row that ran out
	rounds int   // auto: send rounds since it stopped spinning
}

func newSpinner(busy time.Duration) spinner {
	if busy < 0 {
		return spinner{auto: true}
	}
	return spinner{fixed: int64(busy)}
}

// round records a round at now that received n frames and sent sent.
func (s *spinner) round(now int64, n int, sent uint64) {
	if !s.auto {
		return
	}
	if n > 0 && s.sentAt != 0 {
		g := min(now-s.sentAt, int64(maxAutoSpin))
		if s.gap == 0 {
			s.gap = g
		} else {
			s.gap += (g - s.gap) / 8
		}
		if g < int64(maxAutoSpin) {
			s.misses = 0 // spinning would have caught it
		}
		s.sentAt, s.missed = 0, false
	}
	if sent > 0 && sent <= autoSmallRound && s.sentAt == 0 {
		s.sentAt = now
		if s.misses >= autoMisses {
			s.rounds++
		}
	}
}

// spin says whether to poll again at now, the last active round at active.
func (s *spinner) spin(now, active int64) bool {
	if s.fixed > 0 {
		return now-active < s.fixed
	}
	if !s.auto {
		return false
	}
	if s.sentAt != 0 && !s.missed && (s.misses < autoMisses || s.rounds%autoProbe == 0) {
		if now-s.sentAt < min(2*s.gap+int64(autoMargin), int64(maxAutoSpin)) {
			return true
		}
		s.missed = true
		s.misses++
	}
	return now-active < int64(autoFlowSpin)
}
