package roce

// The device's queue-pair table: QPN → queue pair, read by the engine
// without locking (chunks of 4096 atomic pointers), written under d.mu.

import (
	"cmp"
	"fmt"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/qp"
)

type qpChunk [4096]atomic.Pointer[qpEntry]

// qpEntry is the device's record of one queue pair.
type qpEntry struct {
	q      *qp.QP
	qpn    uint32
	eng    atomic.Pointer[engine] // the engine that runs it (Device.engineFor, Device.settle)
	queued atomic.Bool            // on the ready list
	dead   atomic.Bool            // destroyed
	sr     atomic.Bool            // connected with selective repeat once (counted in srQPs)

	// Owned by the engine goroutine.
	touched  bool  // on this round's work list
	deadline int64 // last deadline returned by Progress (0: none)
	heapAt   int64 // time of this entry's live timer-heap element (0: none)
	ring     func()
	failures uint32 // q.Failures() when events were last raised (qpEvents)
	commEst  bool   // communication established seen, or RTR passed (qpEvents)
	resets   uint32 // q.Resets() when commEst was last re-armed (qpEvents)
	lastWQE  uint32 // q.LastWQEReached() when events were last raised (qpEvents)
}

// lookup finds the queue pair with QPN n without locking.
func (d *Device) lookup(n uint32) *qpEntry {
	c := d.qpTab[(n>>12)&4095].Load()
	if c == nil {
		return nil
	}
	return c[n&4095].Load()
}

// addQP allocates a QPN (or takes want, when non-zero), creates the queue
// pair with mk and publishes it to the engine.
func (d *Device) addQP(want uint32, mk func(qpn uint32) (*qp.QP, error)) (*qpEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("roce: create qp: %w", d.closedErr())
	}
	n := want
	if n != 0 {
		if n >= 0xFFFFFF {
			return nil, fmt.Errorf("roce: create qp: QPN %#x is not a unicast 24-bit QPN", n)
		}
		if d.opts.qpns[1] != 0 && n != 1 && (n < d.qpnFirst || n > d.qpnLast) {
			return nil, fmt.Errorf("roce: create qp: QPN %#x is outside this device's range %#x..%#x", n, d.qpnFirst, d.qpnLast)
		}
		if d.qps[n] != nil {
			return nil, fmt.Errorf("roce: create qp: QPN %#x is in use", n)
		}
	}
	if lim := cmp.Or(d.opts.MaxQPs, DefaultMaxQPs); len(d.qps) >= lim {
		return nil, fmt.Errorf("roce: create qp: %d queue pairs (Options.MaxQPs): %w", lim, ErrLimit)
	}
	if n == 0 {
		if len(d.qps) >= int(d.qpnLast-d.qpnFirst+1) {
			return nil, fmt.Errorf("roce: create qp: all %d QPNs of %#x..%#x in use: %w",
				d.qpnLast-d.qpnFirst+1, d.qpnFirst, d.qpnLast, ErrLimit)
		}
		for {
			n = d.nextQPN
			d.nextQPN++
			if d.nextQPN > d.qpnLast {
				d.nextQPN = d.qpnFirst
			}
			if d.qps[n] == nil {
				break
			}
		}
	}
	q, err := mk(n)
	if err != nil {
		return nil, err
	}
	if q.Type() == qp.OOO {
		d.oooQPs.Add(1)
	}
	e := &qpEntry{q: q, qpn: n}
	e.eng.Store(d.engineFor(n, q.Type()))
	e.ring = func() { d.doorbell(e) }
	q.SetDoorbell(e.ring)
	d.qps[n] = e
	d.qpsPeak = max(d.qpsPeak, len(d.qps))
	ci := (n >> 12) & 4095
	c := d.qpTab[ci].Load()
	if c == nil {
		c = new(qpChunk)
		d.qpTab[ci].Store(c)
	}
	c[n&4095].Store(e)
	d.qpUsed[ci]++
	return e, nil
}

// removeQP unpublishes a queue pair; the engine stops delivering to it.
func (d *Device) removeQP(e *qpEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.qps[e.qpn] != e {
		return
	}
	e.dead.Store(true)
	d.removed.Add(1)
	d.groups.drop(e)
	if e.q.Type() == qp.OOO {
		d.oooQPs.Add(-1)
	}
	if e.sr.Load() {
		d.srQPs.Add(-1)
	}
	delete(d.qps, e.qpn)
	if shrunk(len(d.qps), d.qpsPeak) {
		d.qps = remade(d.qps)
		d.qpsPeak = len(d.qps)
	}
	addQPStats(&d.retired, e.q)
	d.retiredQP.add(e.q)
	ci := (e.qpn >> 12) & 4095
	if c := d.qpTab[ci].Load(); c != nil {
		c[e.qpn&4095].Store(nil)
		if d.qpUsed[ci]--; d.qpUsed[ci] == 0 {
			d.qpTab[ci].Store(nil) // a lookup holding it finds nil entries
		}
	}
}

// shrunk reports whether a map that held peak entries and now holds n
// should be remade (remade): a Go map keeps the memory of its largest size,
// so one that grew past 1024 entries is remade at an eighth of its peak.
func shrunk(n, peak int) bool { return peak >= 1024 && n <= peak/8 }

// remade returns a copy of m sized for the entries it holds.
func remade[K comparable, V any](m map[K]V) map[K]V {
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
