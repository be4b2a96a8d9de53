package ooo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// queueFullWait is how long a call waits before posting again when a
// queue pair's send queue was full.
const queueFullWait = time.Millisecond

// call is the state of one call (Write, Read, a Stream).
type call struct {
	pending []op   // what is to be issued, reissues first
	busy    int    // slots with an attempt in flight
	spans   []span // the call's ranges not yet delivered whole, in the order given
	first   uint64 // the sequence number of spans[0]
	// done is told of each range delivered whole, in the order given (a
	// Stream's; nil for Write and Read).
	done func(local, remote uint64, n int) error
}

// span is one range of a call: its operations not yet delivered.
type span struct {
	local, remote uint64
	n, ops        int
}

// add queues a range given to the call.
func (c *call) add(o op) {
	o.seq = c.first + uint64(len(c.spans))
	c.spans = append(c.spans, span{local: o.local, remote: o.remote, n: o.n, ops: 1})
	c.pending = append(c.pending, o)
}

// delivered counts operation o delivered and reports the ranges now
// delivered whole, oldest first.
func (c *call) delivered(o op) error {
	c.spans[o.seq-c.first].ops--
	for len(c.spans) > 0 && c.spans[0].ops == 0 {
		sp := c.spans[0]
		c.spans = c.spans[1:]
		c.first++
		if c.done != nil {
			if err := c.done(sp.local, sp.remote, sp.n); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNotify refuses a notify that leaves out the initiator (its delivered
// completion is the helper's proof).
func checkNotify(notify roce.Notify) error {
	if notify&roce.NotifyInitiator == 0 || notify&^roce.NotifyBoth != 0 {
		return fmt.Errorf("ooo: notify %v: the initiator must be notified (NotifyInitiator or NotifyBoth)", notify)
	}
	return nil
}

// once moves one byte range (Write, Read).
func (w *Writer) once(ctx context.Context, read bool, local, remote uint64, n int, notify roce.Notify) error {
	if err := checkNotify(notify); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("ooo: negative length %d", n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slots[0].local == 0 {
		return errors.New("ooo: writer closed")
	}
	in := make(chan op, 1)
	in <- op{local: local, remote: remote, n: n}
	close(in)
	return w.run(ctx, read, notify, in, nil)
}

// run moves the byte ranges that come on in until it is closed: it posts
// operations on idle slots, waits for their completions and timeouts, and
// reissues; done (if not nil) hears of each range delivered whole.
func (w *Writer) run(ctx context.Context, read bool, notify roce.Notify, in <-chan op, done func(local, remote uint64, n int) error) error {
	for i := range w.lanes {
		w.lanes[i].down = false
		w.lanes[i].staleTID = w.lanes[i].QP.Stats().OOO.StaleTID
	}

	pctx, stop := context.WithCancel(ctx)
	wcs := make(chan roce.WC, 64)
	errc := make(chan error, len(w.lanes))
	var wg sync.WaitGroup
	for i := range w.lanes {
		wg.Add(1)
		go func(cq *roce.CQ) {
			defer wg.Done()
			pump(pctx, cq, wcs, errc)
		}(w.lanes[i].CQ)
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	var polled [16]roce.WC
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	c := &call{done: done}
	for in != nil || len(c.pending) > 0 || c.busy > 0 || w.cm.open() {
		full := false
		for len(c.pending) > 0 && (c.busy == 0 || w.inflight < w.cfg.Window) {
			si, ok := w.pick()
			if !ok {
				break
			}
			o := c.pending[0]
			l := &w.lanes[w.slots[si].lane]
			if max := OpPackets(w.est.loss(), w.cfg.Success, w.cfg.MaxPackets) * l.seg; o.n > max {
				c.pending[0] = op{local: o.local + uint64(max), remote: o.remote + uint64(max), n: o.n - max, tries: o.tries, seq: o.seq}
				c.spans[o.seq-c.first].ops++
				o.n = max
			} else {
				c.pending = c.pending[1:]
			}
			if err := w.post(si, o, read, notify); err != nil {
				l.free = append(l.free, si)
				c.pending = append([]op{o}, c.pending...)
				if errors.Is(err, roce.ErrQueueFull) {
					full = true
					break
				}
				return fmt.Errorf("ooo: %w", err)
			}
			c.busy++
		}
		if w.cm != nil {
			if err := w.maybePost(w.cm, in == nil && len(c.pending) == 0); err != nil {
				return err
			}
		}
		now := time.Now()
		next := now.Add(time.Hour)
		if full {
			next = now.Add(queueFullWait)
		}
		for i := range w.slots {
			if w.slots[i].op.n >= 0 && w.slots[i].deadline.Before(next) {
				next = w.slots[i].deadline
			}
		}
		if r := w.cm; r.open() && r.posted && r.sent && r.due.Before(next) {
			next = r.due
		}
		timer.Reset(next.Sub(now))
		select {
		case o, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			c.add(o)
		case <-ctx.Done():
			if err := w.abandon(); err != nil {
				return errors.Join(ctx.Err(), err)
			}
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("ooo: %w", err)
		case wc := <-wcs:
			if err := w.complete(wc, c); err != nil {
				return err
			}
		case <-timer.C:
			// Completions already waiting are taken first, from the
			// pumps and from the CQs themselves: a timeout is a
			// completion that has not come, not one this loop (or a pump,
			// on a loaded machine) has not read yet.
			for drained := false; !drained; {
				select {
				case wc := <-wcs:
					if err := w.complete(wc, c); err != nil {
						return err
					}
					continue
				default:
				}
				drained = true
				for i := range w.lanes {
					n, err := w.lanes[i].CQ.Poll(polled[:])
					if err != nil {
						return fmt.Errorf("ooo: %w", err)
					}
					for _, wc := range polled[:n] {
						if err := w.complete(wc, c); err != nil {
							return err
						}
					}
					drained = drained && n == 0
				}
			}
			if !read {
				w.lateDropped()
			}
			now = time.Now()
			for i := range w.slots {
				if s := &w.slots[i]; s.op.n >= 0 && !now.Before(s.deadline) {
					if err := w.retry(i, c); err != nil {
						return err
					}
				}
			}
			w.commitDue(w.cm, now)
		}
	}
	return nil
}

// pump hands the completions of one CQ to the call.
func pump(ctx context.Context, cq *roce.CQ, out chan<- roce.WC, errc chan<- error) {
	var buf [16]roce.WC
	for {
		n, err := cq.Wait(ctx, buf[:])
		for i := range n {
			select {
			case out <- buf[i]:
			case <-ctx.Done():
				return
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				errc <- err
			}
			return
		}
	}
}

// pick takes an idle slot of a lane in service, going round the lanes.
func (w *Writer) pick() (int, bool) {
	for k := range w.lanes {
		i := (w.rr + k) % len(w.lanes)
		l := &w.lanes[i]
		if l.down || len(l.free) == 0 {
			continue
		}
		si := l.free[len(l.free)-1]
		l.free = l.free[:len(l.free)-1]
		w.rr = i + 1
		return si, true
	}
	return 0, false
}

// post issues o on slot si with the slot's next tid.
func (w *Writer) post(si int, o op, read bool, notify roce.Notify) error {
	s := &w.slots[si]
	l := &w.lanes[s.lane]
	s.tid++
	if s.tid == 0 {
		s.tid = 1
	}
	wr := roce.SendWR{ID: uint64(si)<<32 | uint64(s.tid), Opcode: roce.WROOOWrite, Flags: roce.Signaled,
		RemoteAddr: l.Remote.VA + o.remote, RKey: l.Remote.RKey,
		Ctx: s.local, RemoteCtx: s.remote, TID: s.tid, Notify: notify, Tag: w.cfg.Tag, Paths: w.cfg.Paths}
	sge := [1]roce.SGE{{Addr: l.Local.Addr + o.local, Length: uint32(o.n), LKey: l.Local.LKey}}
	if o.n > 0 || read {
		wr.SGL = sge[:]
	}
	if w.cm != nil {
		w.cm.component(&wr, s)
	}
	if read {
		wr.Opcode = roce.WROOORead
		wr.SinkRKey = l.Local.RKey
	}
	if err := l.QP.PostSend(wr); err != nil {
		return err
	}
	w.st.Attempts++
	s.op = o
	w.inflight += w.packets(s)
	// The timeout runs from the local completion (the last packet handed
	// to the link: time queued behind the other attempts is not round
	// trip); until then only MaxTimeout bounds the wait.
	s.sent = time.Now()
	s.deadline = s.sent.Add(w.cfg.MaxTimeout)
	return nil
}

// timeout is how long the attempt on slot s waits for its delivered
// completion, counted from its local completion: the round trip's smoothed
// mean plus four deviations (RFC 6298's rule), and at least 5/4 of the
// longest of the last rttWindow round trips (on a loaded machine the round
// trip has a long tail that the deviation does not cover: a timeout inside
// it reissues an operation that was delivered), at least Config.Timeout;
// Config.First until a round trip was measured. It is backed off
// (Config.Backoff) only for an operation that failed more than freeTries
// times on a lane that has delivered nothing since its last timeout: the
// exponent is the smaller of the operation's earlier tries and the lane's
// timeouts in a row, less freeTries. A loss at random costs one round-trip
// timeout (an operation sized for a success of 3/4 fails 4 times in a row
// once in 256), while a lane that stopped answering is waited for longer
// and longer. (Without the allowance the last operations of a call, alone
// in flight, doubled their timeouts at every random loss.)
func (w *Writer) timeout(s *slot) time.Duration {
	t := w.cfg.First
	if w.srtt > 0 {
		t = max(w.cfg.Timeout, w.srtt+4*w.rttv, w.rtts.max()*5/4)
	}
	for range min(s.op.tries, w.lanes[s.lane].misses) - freeTries {
		t = time.Duration(float64(t) * w.cfg.Backoff)
		if t >= w.cfg.MaxTimeout {
			return w.cfg.MaxTimeout
		}
	}
	return min(t, w.cfg.MaxTimeout)
}

// freeTries is how many timeouts in a row an operation has before its
// timeout is backed off.
const freeTries = 3

// sample adds a measured round trip to the smoothed mean and deviation and
// to the recent ones.
func (w *Writer) sample(rtt time.Duration) {
	w.rtts.add(rtt)
	if w.srtt == 0 {
		w.srtt, w.rttv = rtt, rtt/2
		return
	}
	d := rtt - w.srtt
	w.srtt += d / 8
	w.rttv += (max(d, -d) - w.rttv) / 4
}

// rttWindow is how many recent round trips the timeout's maximum covers.
const rttWindow = 256

// recentRTTs keeps the last rttWindow round trips and their maximum.
type recentRTTs struct {
	ring  [rttWindow]time.Duration
	next  int
	top   time.Duration // the maximum of ring
	stale bool          // top left the window: scan again
}

func (r *recentRTTs) add(d time.Duration) {
	old := r.ring[r.next]
	r.ring[r.next] = d
	r.next = (r.next + 1) % rttWindow
	switch {
	case d >= r.top:
		r.top, r.stale = d, false
	case old == r.top:
		r.stale = true
	}
}

func (r *recentRTTs) max() time.Duration {
	if r.stale {
		r.top, r.stale = 0, false
		for _, d := range r.ring {
			r.top = max(r.top, d)
		}
	}
	return r.top
}

// packets is how many packets the operation on slot s sends.
func (w *Writer) packets(s *slot) int {
	seg := w.lanes[s.lane].seg
	return max(1, (s.op.n+seg-1)/seg)
}

// complete handles one completion of call c.
func (w *Writer) complete(wc roce.WC, c *call) error {
	if wc.ID&commitBit != 0 {
		w.commitComplete(w.cm, wc)
		return nil
	}
	si, tid := int(wc.ID>>32), uint32(wc.ID)
	if si >= len(w.slots) || w.slots[si].op.n < 0 || w.slots[si].tid != tid || wc.Ctx != 0 && wc.Ctx != w.slots[si].local {
		if wc.Opcode == roce.WCOOODelivered {
			w.st.StaleCompletions++
			// The attempt before the current one arrived after all: its
			// round trip is a sample (the estimate was too short) and its
			// outcome a success, not a loss.
			if si < len(w.slots) && wc.Status == roce.WCSuccess && w.slots[si].prevTID == tid && !w.slots[si].prevSent.IsZero() {
				s := &w.slots[si]
				w.sample(time.Since(s.prevSent))
				w.est.amend(s.prevPackets)
				w.st.Late++
				s.prevTID = 0
			}
		}
		return nil // a local completion of an attempt given up
	}
	s := &w.slots[si]
	switch {
	case wc.Status == roce.WCSuccess && wc.Opcode == roce.WCOOODelivered:
		l := &w.lanes[s.lane]
		w.st.Delivered++
		w.st.Bytes += uint64(s.op.n)
		w.est.add(w.packets(s), true)
		l.misses = 0
		w.sample(time.Since(s.sent))
		o := s.op
		w.idle(si)
		c.busy--
		return c.delivered(o)
	case wc.Status != roce.WCSuccess: // the request could not go out: reissue
		return w.retry(si, c)
	case wc.Opcode == roce.WCOOOWrite || wc.Opcode == roce.WCOOORead: // sent: the round trip starts
		s.sent = time.Now()
		s.deadline = s.sent.Add(w.timeout(s))
	}
	return nil
}

// idle ends the attempt on slot si: the slot is free again and its packets
// no longer in flight.
func (w *Writer) idle(si int) {
	w.idleAs(si, false)
}

// idleAs is idle; failed says the attempt failed (a commit call: its round
// fails).
func (w *Writer) idleAs(si int, failed bool) {
	s := &w.slots[si]
	if s.inCommit {
		s.inCommit = false
		w.cm.ended(s.q, failed)
		if failed && s.q != 0 {
			// A late delivered completion of this attempt must not count
			// on its queue once a later round reuses it: a fresh context
			// makes it stale_ctx.
			if err := w.renew(si); err != nil && w.cm.err == nil {
				w.cm.err = err
			}
		}
	}
	w.inflight -= w.packets(s)
	s.op.n = -1
	w.lanes[s.lane].free = append(w.lanes[s.lane].free, si)
}

// retry ends the attempt on slot si of call c as failed and queues its
// operation again.
func (w *Writer) retry(si int, c *call) error {
	s := &w.slots[si]
	l := &w.lanes[s.lane]
	o := s.op
	w.est.add(w.packets(s), false)
	w.st.Retries++
	s.prevTID, s.prevSent, s.prevPackets = s.tid, s.sent, w.packets(s)
	l.misses++
	if l.misses >= w.cfg.DownAfter && !l.down && w.live() > 1 {
		l.down = true
		w.st.Failovers++
	}
	w.idleAs(si, true)
	c.busy--
	o.tries++
	if o.tries >= w.cfg.MaxTries {
		return fmt.Errorf("%w: %d bytes at offset %d, %d tries (tid %d)", ErrTooManyTries, o.n, o.local, o.tries, s.tid)
	}
	c.pending = append([]op{o}, c.pending...)
	return nil
}

// lateDropped amends the loss estimate for the late completions the
// transport dropped since the last look: on a queue pair that only writes,
// stale_tid counts completions that came for an attempt the helper had
// already reissued (the tid no longer outstanding). Such an attempt was
// delivered, not lost; the helper cannot tell which, so the latest failures
// are amended.
func (w *Writer) lateDropped() {
	for i := range w.lanes {
		l := &w.lanes[i]
		n := l.QP.Stats().OOO.StaleTID
		for ; l.staleTID < n; l.staleTID++ {
			w.est.amend(0)
		}
	}
}

// live counts the lanes in service.
func (w *Writer) live() int {
	n := 0
	for i := range w.lanes {
		if !w.lanes[i].down {
			n++
		}
	}
	return n
}

// abandon gives up the attempts in flight: their local contexts go back to
// the pool (what still comes for them is dropped as stale_ctx) and fresh
// ones take their place.
func (w *Writer) abandon() error {
	var errs []error
	for i := range w.slots {
		if w.slots[i].op.n < 0 {
			continue
		}
		w.idle(i)
		errs = append(errs, w.renew(i))
	}
	return errors.Join(errs...)
}

// renew gives slot si's local context back to the pool and takes a fresh
// one.
func (w *Writer) renew(si int) error {
	s := &w.slots[si]
	l := &w.lanes[s.lane]
	if err := l.QP.ReleaseContexts([]roce.Ctx{s.local}); err != nil {
		return err
	}
	c, err := l.QP.AcquireContexts(1)
	if err != nil {
		return err
	}
	s.local = c[0]
	return nil
}
