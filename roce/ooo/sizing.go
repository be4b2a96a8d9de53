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

// lossEstimate follows the packet loss rate from the outcomes of
// operations: s is a moving average of success (1 delivered, 0 timed out)
// and m of the packets each outcome depended on (n + 1). An operation of m
// packets succeeds with probability (1−p)^m, so p ≈ 1 − s^(1/m).
type lossEstimate struct {
	s, m float64
}

// estWeight is the moving averages' weight of a new outcome.
const estWeight = 1.0 / 8

func newLossEstimate(initial float64) lossEstimate {
	if !(initial > 0) {
		initial = 0
	}
	if initial > 0.99 {
		initial = 0.99
	}
	return lossEstimate{s: 1 - initial, m: 1}
}

// add records the outcome of an operation of n packets.
func (e *lossEstimate) add(n int, ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	e.s += (v - e.s) * estWeight
	e.m += (float64(n+1) - e.m) * estWeight
}

// loss is the current estimate of the packet loss rate.
func (e *lossEstimate) loss() float64 {
	if e.s <= 0 {
		return 1
	}
	return 1 - math.Pow(e.s, 1/e.m)
}
