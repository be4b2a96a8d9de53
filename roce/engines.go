package roce

import (
	"errors"
	"fmt"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/roce/qp"
)

// maxEngines bounds Options.Engines (the handoff's wake mask is 64 bits).
const maxEngines = 64

// startEngines starts the device's progress engines: one over the whole
// link, or Options.Engines over its queues shared out (link.Splitter), each
// with an inbox from every other (handoff.go).
//
// Queue pairs are shared out by QPN (engineFor); everything device-wide
// stays correct with several engines: each engine has its own timers,
// transmit batch and counters (added to the device's at the end of its
// rounds), completion queues and shared receive queues take their lock,
// the CM's QP1 is a queue pair like another, multicast frames reach the
// group members of other engines through their inboxes, OOO queue pairs
// (which share the device's context pool) all run on engine 0, and sync and
// Close wait for every engine. Daemon clients (link/shm) run one engine.
func (d *Device) startEngines() error {
	n := max(d.opts.Engines, 1)
	parts := []link.Link{d.l}
	if n > 1 {
		var err error
		if parts, err = d.splitLink(n); err != nil {
			return err
		}
	}
	frame := max(d.props.MaxFrame, d.props.MTU+22)
	d.engs = make([]*engine, n)
	for i, l := range parts {
		e := newEngine(d, l, i)
		e.cpus = d.opts.CPUs
		if n > 1 {
			e.inbox = make([]*handRing, n)
			for j := range n {
				if j != i {
					e.inbox[j] = newHandRing(frame, d.opts.RxBatch)
				}
			}
			if len(d.opts.CPUs) > 0 {
				e.cpus = []int{d.opts.CPUs[i%len(d.opts.CPUs)]}
			}
		}
		d.engs[i] = e
	}
	d.live.Store(int32(n))
	started := make(chan error, n)
	for _, e := range d.engs {
		go e.run(started)
	}
	var errs []error
	for range n {
		if err := <-started; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		d.closing.Store(true)
		for _, e := range d.engs {
			e.l.Wake()
		}
		<-d.done
		return errors.Join(errs...)
	}
	return nil
}

// splitLink shares the link's queues out among n engines, or says why it
// cannot.
func (d *Device) splitLink(n int) ([]link.Link, error) {
	if n > maxEngines {
		return nil, fmt.Errorf("%d engines: at most %d", n, maxEngines)
	}
	if d.capw != nil {
		return nil, fmt.Errorf("%d engines: not with a capture (Options.Capture), which sees the link as one queue", n)
	}
	s, ok := d.l.(link.Splitter)
	if !ok {
		return nil, fmt.Errorf("%d engines: link %s has one queue (more engines need AF_XDP on an interface with several rx queues)", n, d.props.Name)
	}
	if q := s.Queues(); n > q {
		return nil, fmt.Errorf("%d engines: link %s has %d queues (one engine per queue at most)", n, d.props.Name, q)
	}
	return s.Split(n)
}

// engineFor is the engine that runs a new queue pair qpn of type t: engine
// qpn mod the number of engines, but engine 0 for OOO queue pairs, whose
// contexts come from one pool per device. An RC or UC queue pair moves when
// it connects (settle).
func (d *Device) engineFor(qpn uint32, t qp.Type) *engine {
	if len(d.engs) == 1 || t == qp.OOO {
		return d.engs[0]
	}
	return d.engs[qpn%uint32(len(d.engs))]
}

// qpMove asks an engine to hand queue pair q to engine to.
type qpMove struct {
	q    *qpEntry
	to   *engine
	done chan struct{}
}

// settle moves an RC or UC queue pair that is about to connect (to RTR) to
// remote QPN r onto engine min(its QPN, r) mod the number of engines: both
// ends compute the same index, so two devices of as many engines run a
// connection on the same engine index whatever QPNs they drew, and where
// the wire keeps the queue index (veth: what an AF_XDP socket sends on
// queue k arrives on the peer's queue k) no frame of it changes engines.
// (The smaller QPN rather than the sum: two ends that allocate QPNs alike
// connect equal QPNs, whose sums are all even.) The engine running it
// makes the move at the start of a round (applyMoves); settle returns once
// it has.
func (d *Device) settle(q *qpEntry, r uint32) {
	n := uint32(len(d.engs))
	if n == 1 || (q.q.Type() != qp.RC && q.q.Type() != qp.UC) {
		return
	}
	to, from := d.engs[min(q.qpn, r)%n], q.eng.Load()
	if to == from {
		return
	}
	m := qpMove{q: q, to: to, done: make(chan struct{})}
	from.moveMu.Lock()
	from.moves = append(from.moves, m)
	from.moveMu.Unlock()
	from.movePending.Store(true)
	from.bell.Store(true)
	from.l.Wake()
	from.poke()
	select {
	case <-m.done:
	case <-d.done:
	}
}

// applyMoves hands the queue pairs settle asked for to their new engines.
// A queue pair's element in this engine's timer heap stays behind and is
// skipped when it comes up (collect); its doorbell on this engine's list is
// passed on; the new engine runs it once (a doorbell), which arms its
// timers there.
func (e *engine) applyMoves() {
	e.movePending.Store(false)
	e.moveMu.Lock()
	ms := e.moves
	e.moves = nil
	e.moveMu.Unlock()
	for _, m := range ms {
		if q := m.q; q.eng.Load() == e {
			q.heapAt, q.deadline, q.touched = 0, 0, false
			q.eng.Store(m.to)
			e.d.doorbell(q)
		}
		close(m.done)
	}
}

// doorbell marks q runnable and wakes its engine if it sleeps.
func (d *Device) doorbell(q *qpEntry) {
	e := q.eng.Load()
	if q.queued.CompareAndSwap(false, true) {
		e.readyMu.Lock()
		e.posted = append(e.posted, q)
		e.readyMu.Unlock()
	}
	e.bell.Store(true)
	// Only the first doorbell after the engine went to sleep wakes it: the
	// others find sleeping cleared and save the system call (an application
	// posting a burst while the engine sleeps rang Wake once per post).
	if e.sleeping.Load() && e.sleeping.CompareAndSwap(true, false) {
		d.st.wakeups.Add(1)
		e.l.Wake()
	}
}

// sync returns once every engine has run a whole round after the call, so
// that what was posted or modified before it has been processed (and no
// engine still places through OOO contexts released before it). It returns
// at once on a closed device.
func (d *Device) sync() {
	var start [maxEngines]uint64
	for i, e := range d.engs {
		start[i] = e.rounds.Load()
	}
	for {
		left := false
		for i, e := range d.engs {
			if e.rounds.Load() < start[i]+2 {
				// Ring and wake on every pass, not once: the round running
				// at the call may consume the bell, and an idle engine then
				// sleeps before the second round this waits for.
				left = true
				e.bell.Store(true)
				e.l.Wake()
			}
		}
		if !left {
			return
		}
		select {
		case <-d.done:
			return
		case <-time.After(20 * time.Microsecond):
		}
	}
}
