package ooo

import "math"

// OpPackets is the sizing rule: the largest n, from 1 to max, such that an
// operation of n packets and its completion packet all arrive with
// probability at least success at packet loss rate loss, that is
// (1−loss)^(n+1) ≥ success: n = ⌊ln success / ln(1−loss)⌋ − 1. With no loss
// it is max; when even one packet falls short it is 1.
func OpPackets(loss, success float64, max int) int {
	if max < 1 {
		max = 1
	}
	if !(loss > 0) { // also NaN
		return max
	}
	if loss >= 1 || !(success > 0 && success < 1) {
		return 1
	}
	n := math.Floor(math.Log(success)/math.Log1p(-loss)) - 1
	if n < 1 {
		return 1
	}
	if n > float64(max) {
		return max
	}
	return int(n)
}

// lossEstimate is the maximum-likelihood estimate of the packet loss rate
// p from the outcomes of the last estWindow operations. An operation whose
// success depended on m packets (its n packets and the completion, m =
// n + 1) succeeds with probability q^m, q = 1 − p, so the log-likelihood of
// the window is
//
//	ℓ(q) = A·ln q + Σ_failed ln(1 − q^m),   A = Σ_succeeded m,
//
// whose derivative A/q − Σ_failed m·q^(m−1)/(1 − q^m) falls strictly in q:
// its one root is found by bisection. Every outcome weighs by what it says
// about a packet, so the failure of an operation of 257 packets (almost
// certain at 2 %) barely moves the estimate while the success of an
// operation of 14 says much: averaging outcomes and sizes separately, as
// before, ran several times above the true loss when the sizes varied.
// With no failure in the window the estimate is 0, with no success 1;
// before the first outcome it is the configured start.
type lossEstimate struct {
	ring  [estWindow]outcome
	next  int // where the next outcome goes in ring
	count int // outcomes in ring
	// The window, summed: packets of the successes, and the failures by
	// size (few distinct sizes: operations are sized by one rule).
	succ  int
	fails []sizeCount
	p     float64 // the estimate
	dirty bool    // p is out of date
}

type outcome struct {
	m  int
	ok bool
}

type sizeCount struct{ m, n int }

// estWindow is how many recent operations the estimate weighs: at 1 %
// loss and operations sized by the rule, some 7,000 packets and 70 losses.
const estWindow = 256

// estRounds of bisection put q within 2^-40 of the root.
const estRounds = 40

func newLossEstimate(initial float64) lossEstimate {
	if !(initial > 0) {
		initial = 0
	}
	return lossEstimate{p: min(initial, 0.99)}
}

// add records the outcome of an operation of n packets.
func (e *lossEstimate) add(n int, ok bool) {
	if e.count == estWindow {
		e.count--
		e.drop(e.ring[e.next])
	}
	o := outcome{m: max(n, 1) + 1, ok: ok}
	e.ring[e.next] = o
	e.next = (e.next + 1) % estWindow
	e.count++
	if ok {
		e.succ += o.m
	} else {
		e.failure(o.m, 1)
	}
	e.dirty = true
}

// amend turns the latest failure of an operation of n packets (any size
// when n is 0) still in the window into a success: its delivered completion
// came after all, late (the timeout was short, not a packet lost). It
// reports whether it found one.
func (e *lossEstimate) amend(n int) bool {
	for k := 1; k <= e.count; k++ {
		o := &e.ring[(e.next-k+estWindow)%estWindow]
		if !o.ok && (n == 0 || o.m == n+1) {
			m := o.m
			o.ok = true
			e.failure(m, -1)
			e.succ += m
			e.dirty = true
			return true
		}
	}
	return false
}

// drop takes an outcome leaving the window out of the sums.
func (e *lossEstimate) drop(o outcome) {
	if o.ok {
		e.succ -= o.m
	} else {
		e.failure(o.m, -1)
	}
}

// failure adds d failures of operations of m packets.
func (e *lossEstimate) failure(m, d int) {
	for i := range e.fails {
		if e.fails[i].m == m {
			if e.fails[i].n += d; e.fails[i].n == 0 {
				e.fails[i] = e.fails[len(e.fails)-1]
				e.fails = e.fails[:len(e.fails)-1]
			}
			return
		}
	}
	e.fails = append(e.fails, sizeCount{m, d})
}

// loss is the current estimate of the packet loss rate.
func (e *lossEstimate) loss() float64 {
	if !e.dirty {
		return e.p
	}
	e.dirty = false
	switch {
	case len(e.fails) == 0:
		e.p = 0
	case e.succ == 0:
		e.p = 1
	default:
		// slope is ℓ'(q): positive below the root, negative above.
		slope := func(q float64) float64 {
			d := float64(e.succ) / q
			for _, f := range e.fails {
				qm := math.Pow(q, float64(f.m))
				d -= float64(f.n*f.m) * qm / q / (1 - qm)
			}
			return d
		}
		lo, hi := 0.0, 1.0
		for range estRounds {
			if q := (lo + hi) / 2; slope(q) > 0 {
				lo = q
			} else {
				hi = q
			}
		}
		e.p = 1 - (lo+hi)/2
	}
	return e.p
}
