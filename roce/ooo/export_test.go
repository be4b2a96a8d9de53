package ooo

// SimulateEstimate runs the loss estimate over ops simulated operations at
// true loss p, each sized by OpPackets, and returns the final estimate.
func SimulateEstimate(p, success float64, maxPackets, ops int, rnd func() float64) float64 {
	e := newLossEstimate(0)
	for range ops {
		n := OpPackets(e.loss(), success, maxPackets)
		ok := true
		for range n + 1 {
			if rnd() < p {
				ok = false
			}
		}
		e.add(n, ok)
	}
	return e.loss()
}
