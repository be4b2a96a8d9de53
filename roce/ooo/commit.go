package ooo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// A Commit is the record a commit call (WriteCommit, StreamCommit) sends
// once everything it wrote is delivered: Len bytes at offset Local of the
// lane's local region, written at offset Remote of the peer's region into
// the peer's context Ctx (one not in Target.Ctxs: the peer watches it),
// with NotifyBoth, so the peer's user gets a target completion for it and
// this side a delivered one.
type Commit struct {
	Local, Remote uint64
	Len           int
	Ctx           roce.Ctx
}

// commitBit marks the work request ids of commits (slots' ids are
// slot << 32 | tid, slot < 2^31).
const commitBit = 1 << 63

// commitRun is one commit call's conditional state (docs/ooo.md, "The
// conditional commit"). Every attempt of the call is a component of the
// current round, counting on the round's conditional queue; once the input
// is closed and posted whole, and no attempt of another round is in
// flight, the commit is posted conditional on ≥ k, k the round's attempts.
// An attempt that fails (times out, or completes in error) fails its
// round's queue, so a commit posted for it flushes unsent, and the next
// round begins on a queue with no attempt in flight (cleared): the reissues
// are its components. While no such queue is free, attempts count on none
// (queue 0), and the commit waits for them to end.
type commitRun struct {
	c       Commit
	l       *lane
	cur     uint8                       // the current round's queue (0: none free)
	k       uint32                      // attempts posted in the current round
	live    [roce.MaxCondQueues + 1]int // attempts in flight per queue (0: counting on none)
	posted  bool                        // a commit is in the send queue or in flight
	postedQ uint8                       // its queue
	tries   int                         // commit attempts sent in this call
	sent    bool                        // the commit's local completion came: its timeout runs
	due     time.Time                   // its deadline
	done    bool                        // its delivered completion came
	err     error                       // a counter command or a context renewal failed
}

// open reports whether the call still waits for its commit (false for a
// call without one).
func (r *commitRun) open() bool { return r != nil && !r.done }

// WriteCommit is Write (notify NotifyInitiator), then the commit c, sent by
// the lane's engine itself as a conditional request the moment the last
// operation of the range is delivered, instead of this side waiting for
// the deliveries first. A failed operation fails the commit waiting on it
// (it flushes, never sent) and the reissues carry a fresh one, so the
// commit is sent only once every byte of the range is delivered. It
// returns once the commit is delivered. One lane only: conditional queues
// belong to a queue pair.
func (w *Writer) WriteCommit(ctx context.Context, local, remote uint64, n int, c Commit) error {
	if n < 0 {
		return fmt.Errorf("ooo: negative length %d", n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slots[0].local == 0 {
		return errors.New("ooo: writer closed")
	}
	if err := w.beginCommit(c); err != nil {
		return err
	}
	in := make(chan op, 1)
	in <- op{local: local, remote: remote, n: n}
	close(in)
	return w.endCommit(w.run(ctx, false, roce.NotifyInitiator, in, nil))
}

// StreamCommit is Stream (notify NotifyInitiator) ending with the commit
// c: Close posts it, as WriteCommit does, once every range added is posted,
// and returns once it is delivered (write the record before Close). The
// ranges' delivered callbacks come as for Stream.
func (w *Writer) StreamCommit(ctx context.Context, delivered func(local, remote uint64, n int) error, c Commit) (*Stream, error) {
	return w.stream(ctx, roce.NotifyInitiator, delivered, &c)
}

// beginCommit sets up a commit call (w.mu held).
func (w *Writer) beginCommit(c Commit) error {
	if len(w.lanes) != 1 {
		return fmt.Errorf("ooo: commit over %d lanes (conditional queues are one queue pair's: one lane)", len(w.lanes))
	}
	if c.Len < 0 || c.Ctx.ID() == 0 {
		return fmt.Errorf("ooo: commit of %d bytes to context %v", c.Len, c.Ctx)
	}
	l := &w.lanes[0]
	if w.commitCtx == 0 {
		x, err := l.QP.AcquireContexts(1)
		if err != nil {
			return fmt.Errorf("ooo: commit context: %w", err)
		}
		w.commitCtx = x[0]
	}
	r := &commitRun{c: c, l: l}
	r.pickQueue()
	if r.err != nil {
		return fmt.Errorf("ooo: %w", r.err)
	}
	w.cm = r
	return nil
}

// endCommit ends a commit call (if this is one) that returned err. A
// commit still waiting at the send queue's head would hold every later
// request behind it: on an error its queue is failed, so that it flushes.
func (w *Writer) endCommit(err error) error {
	r := w.cm
	if r == nil {
		return err
	}
	w.cm = nil
	if err != nil && r.posted {
		err = errors.Join(err, r.l.QP.CondCounter(r.postedQ).Fail())
	}
	return err
}

// pickQueue makes the next round's queue one with no attempt in flight and
// no commit waiting on it, cleared; none free leaves cur 0.
func (r *commitRun) pickQueue() {
	r.cur, r.k = 0, 0
	for q := uint8(1); q <= roce.MaxCondQueues; q++ {
		if r.live[q] == 0 && !(r.posted && r.postedQ == q) {
			if err := r.l.QP.CondCounter(q).Clear(); err != nil && r.err == nil {
				r.err = err
			}
			r.cur = q
			return
		}
	}
}

// component makes wr an attempt of the current round (post).
func (r *commitRun) component(wr *roce.SendWR, s *slot) {
	if r.cur != 0 {
		wr.Notify |= roce.NotifyToSelf
		wr.CondQueue = r.cur
		r.k++
	}
	r.live[r.cur]++
	s.inCommit, s.q = true, r.cur
}

// ended takes an attempt of queue q out of flight (idle); failed says it
// failed: its queue is poisoned and, when it is the current round's, the
// next round begins.
func (r *commitRun) ended(q uint8, failed bool) {
	r.live[q]--
	if failed && q != 0 {
		if err := r.l.QP.CondCounter(q).Fail(); err != nil && r.err == nil {
			r.err = err
		}
		if q == r.cur {
			r.cur = 0
		}
	}
	if r.cur == 0 {
		r.pickQueue()
	}
}

// maybePost posts the commit of the current round when the call's input is
// closed and posted whole (whole) and no attempt of another round, or
// counting on none, is in flight.
func (w *Writer) maybePost(r *commitRun, whole bool) error {
	if r.err != nil {
		return fmt.Errorf("ooo: commit: %w", r.err)
	}
	if r.posted || r.done || !whole || r.cur == 0 {
		return nil
	}
	for q, n := range r.live {
		if n > 0 && uint8(q) != r.cur {
			return nil
		}
	}
	if r.tries >= w.cfg.MaxTries {
		return fmt.Errorf("%w: the commit, %d tries", ErrTooManyTries, r.tries)
	}
	w.commitTID++
	if w.commitTID == 0 {
		w.commitTID = 1
	}
	l := r.l
	wr := roce.SendWR{ID: commitBit | uint64(w.commitTID), Opcode: roce.WROOOWrite, Flags: roce.Signaled,
		RemoteAddr: l.Remote.VA + r.c.Remote, RKey: l.Remote.RKey, Ctx: w.commitCtx, RemoteCtx: r.c.Ctx,
		TID: w.commitTID, Notify: roce.NotifyBoth, Tag: w.cfg.Tag, CondQueue: r.cur,
		Cond: roce.Cond{Op: roce.CondGE, Value: r.k}}
	sge := [1]roce.SGE{{Addr: l.Local.Addr + r.c.Local, Length: uint32(r.c.Len), LKey: l.Local.LKey}}
	if r.c.Len > 0 {
		wr.SGL = sge[:]
	}
	if err := l.QP.PostSend(wr); err != nil {
		if errors.Is(err, roce.ErrQueueFull) {
			return nil // the next turn of the loop tries again
		}
		return fmt.Errorf("ooo: commit: %w", err)
	}
	r.posted, r.postedQ, r.sent = true, r.cur, false
	r.due = time.Now().Add(w.cfg.MaxTimeout)
	w.st.CommitsPosted++
	return nil
}

// commitComplete handles a completion of the commit.
func (w *Writer) commitComplete(r *commitRun, wc roce.WC) {
	if r == nil || uint32(wc.ID) != w.commitTID || !r.posted {
		if wc.Opcode == roce.WCOOODelivered {
			w.st.StaleCompletions++
		}
		return
	}
	switch {
	case wc.Status == roce.WCWRFlushErr: // its round failed: a fresh one follows
		r.posted = false
		w.st.CommitFlushes++
	case wc.Status != roce.WCSuccess:
		r.posted = false
		r.tries++
	case wc.Opcode == roce.WCOOODelivered:
		r.done = true
	default: // sent: its round trip starts
		r.tries++
		r.sent = true
		t := w.cfg.First
		if w.srtt > 0 {
			t = max(w.cfg.Timeout, w.srtt+4*w.rttv)
		}
		r.due = time.Now().Add(min(t*time.Duration(r.tries), w.cfg.MaxTimeout))
	}
}

// commitDue reissues the commit when its delivered completion is late: its
// condition holds already (its round is whole), so it goes at once.
func (w *Writer) commitDue(r *commitRun, now time.Time) {
	if r.open() && r.posted && r.sent && !now.Before(r.due) {
		r.posted = false
		w.st.CommitRetries++ // Attempts counts operations only: so does Retries
	}
}
