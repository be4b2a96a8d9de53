package xfer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// The controller's side of a third-party copy (copy_serve.go has the
// protocol): its bytes never pass through here, only the requests and the
// completions.

// Tuning of Copy: operations of copyOp bytes at most (smaller after
// timeouts: copier), one per context pair in flight, copySlots pairs at most (4 MiB in flight: 8 MiB overflowed the
// AF_XDP rings of a veth lab, ~5 % of the operations retried); an operation whose completion has not come within its timeout
// (RFC 6298's srtt + 4 × rttvar of the time from post to completion,
// copyFirstRTO before the first, at least copyTimeout; doubled at every
// reissue, at most copyMaxTimeout) is
// reissued with a larger tid, copyMaxTries times at most.
const (
	copyOp         = 256 << 10
	copyTimeout    = 20 * time.Millisecond  // the least
	copyFirstRTO   = 200 * time.Millisecond // before any round trip was measured
	copyMaxTimeout = 4 * time.Second
	copyMaxTries   = 12
	copySlots      = 16
)

// errNo3P: a server's hello did not announce third-party copy.
func errNo3P(role string) error {
	return fmt.Errorf("the %s server does not offer third-party copy (capability %q): an xdproce from before it; upgrade it", role, cm.CapOOO3P)
}

// Copy moves the file name on the server at the end of src to the server at
// the end of dst, stored there as newName, by third-party OOO READs that
// this side (dev) controls: the bytes go from one server to the other, the
// completions come here. The sink checks the SHA-256 the source computed
// before it stores the file. It closes both connections.
func Copy(ctx context.Context, dev *roce.Device, src, dst *cm.Conn, name, newName string, opts *Options) (res Result, err error) {
	o := opts.withDefaults()
	cs, ct := newCtrl(ctx, src), newCtrl(ctx, dst)
	defer cs.close()
	defer ct.close()
	for _, v := range []error{ValidName(name), ValidName(newName)} {
		if v != nil {
			return res, v
		}
	}
	if !src.PeerHas(cm.CapOOO3P) {
		return res, errNo3P("source")
	}
	if !dst.PeerHas(cm.CapOOO3P) {
		return res, errNo3P("sink")
	}
	q, err := newBareQP(dev, roce.OOO, 4*oooContexts, 2*oooContexts, 1, src.LocalAddr())
	if err != nil {
		return res, err
	}
	defer q.close()
	mine, err := q.qp.AcquireContexts(oooContexts)
	if err != nil {
		return res, err
	}
	// The source: the file, its SHA-256, its buffer and contexts.
	req := &message{Type: msgCopySource, Version: ProtocolVersion, Name: name}
	q.endpoint(req)
	if err := cs.send(req); err != nil {
		return res, err
	}
	var accS message
	if err := cs.expect(&accS, msgAccept); err != nil {
		return res, fmt.Errorf("source: %w", ctxErr(ctx, err))
	}
	// The sink: a buffer of that size and contexts.
	req = &message{Type: msgCopySink, Version: ProtocolVersion, Name: newName, Size: accS.Size, Force: o.Force}
	q.endpoint(req)
	if err := ct.send(req); err != nil {
		return res, err
	}
	var accT message
	if err := ct.expect(&accT, msgAccept); err != nil {
		return res, fmt.Errorf("sink: %w", ctxErr(ctx, err))
	}
	n := min(len(mine), len(accS.Ctxs), len(accT.Ctxs), copySlots)
	if n == 0 || accS.Size < 0 || accS.Size > MaxCopySize {
		return res, fmt.Errorf("source offered %d bytes and %d contexts, sink %d contexts", accS.Size, len(accS.Ctxs), len(accT.Ctxs))
	}
	// The source admits the sink; this side's queue pair goes to the source.
	if err := cs.send(&message{Type: msgCopySinkQP, QPN: accT.QPN, GID: accT.GID}); err != nil {
		return res, err
	}
	var ok message
	if err := cs.expect(&ok, msgOK); err != nil {
		return res, fmt.Errorf("source: admit the sink: %w", ctxErr(ctx, err))
	}
	sinkGID, err := netip.ParseAddr(accT.GID)
	if err != nil {
		return res, fmt.Errorf("sink gid %q: %w", accT.GID, err)
	}
	accS.PathMTU = min(accS.PathMTU, accT.PathMTU)
	if err := q.connect(&accS, o.Connect); err != nil {
		return res, err
	}
	res = Result{Name: newName, Size: accS.Size, Link: dev.LinkName(), Peer: accS.Link + " → " + accT.Link, Op: OpOOO3P,
		PathMTU: min(q.pmtu.Bytes(), accS.PathMTU)}
	res.OOO = &OOOResult{Paths: 1, OpPackets: copyOp / max(res.PathMTU, 1)}
	start := time.Now()
	cp := &copier{q: q, size: uint64(accS.Size), src: accS, dst: accT, sinkGID: sinkGID, mine: mine[:n], res: res.OOO, progress: o.Progress}
	if err := cp.run(ctx); err != nil {
		return res, err
	}
	res.finish(start)
	res.OOO.OpPackets = int(cp.opSize) / max(res.PathMTU, 1)
	q.oooCounters(&res)
	// The sink checks and stores; the source lets go.
	if err := ct.send(&message{Type: msgEnd, Size: accS.Size, SHA256: accS.SHA256}); err != nil {
		return res, err
	}
	if err := ct.expect(&ok, msgOK); err != nil {
		return res, fmt.Errorf("sink: %w", ctxErr(ctx, err))
	}
	if ok.SHA256 != accS.SHA256 {
		return res, fmt.Errorf("sink stored sha256 %s, the source has %s", ok.SHA256, accS.SHA256)
	}
	res.SHA256 = ok.SHA256
	if err := cs.send(&message{Type: msgEnd}); err == nil {
		cs.expect(&ok, msgOK)
	}
	return res, nil
}

// A copier runs the third-party READs of a copy: one operation per context
// pair (this side's, the source's and the sink's i-th) in flight.
type copier struct {
	q        *qpConn
	size     uint64
	src, dst message
	sinkGID  netip.Addr
	mine     []roce.Ctx
	res      *OOOResult
	progress func(done, total int64)
	slots    []copySlot
	next     uint64 // the next byte not yet handed to an operation
	done     uint64
	// Sizing: operations of opSize bytes (copyOp at first, at least one
	// packet, minOp); halved when an operation of that size (or smaller)
	// times out, doubled after a run of deliveries (twice the slots) with
	// no timeout; the part of a timed-out
	// operation beyond the new size goes to pending, handed out first.
	opSize, minOp uint64
	streak        int
	srtt, rttvar  time.Duration // post-to-completion time of first tries (RFC 6298)
	pending       []copySpan
}

// copySpan is a range of the file not yet delivered.
type copySpan struct{ off, n uint64 }

// copySlot is the operation in flight on one context pair.
type copySlot struct {
	off      uint64
	n        uint32
	tid      uint32
	tries    int
	deadline time.Time
	posted   time.Time
	busy     bool
}

func (c *copier) post(i int) error {
	s := &c.slots[i]
	s.tid++
	s.tries++
	if s.tries > copyMaxTries {
		return fmt.Errorf("third-party READ of %d bytes at %d: no completion after %d tries", s.n, s.off, copyMaxTries)
	}
	if s.tries > 1 {
		c.res.Retries++
	}
	c.res.Attempts++
	s.posted = time.Now()
	rto := copyFirstRTO
	if c.srtt > 0 {
		rto = max(copyTimeout, c.srtt+4*c.rttvar)
	}
	s.deadline = s.posted.Add(min(rto<<(s.tries-1), copyMaxTimeout))
	return c.q.qp.PostSend(roce.SendWR{ID: uint64(i)<<32 | uint64(s.tid), Opcode: roce.WROOO3PRead,
		RemoteAddr: c.src.Addr + s.off, RKey: c.src.RKey, Ctx: c.mine[i], RemoteCtx: roce.Ctx(c.src.Ctxs[i]),
		TID: s.tid, Notify: roce.NotifyInitiator,
		Sink: roce.ThirdParty{GID: c.sinkGID, QPN: c.dst.QPN, Ctx: roce.Ctx(c.dst.Ctxs[i]), VA: c.dst.Addr + s.off,
			RKey: c.dst.RKey, Len: s.n}})
}

// run keeps every context pair busy until each byte is delivered.
func (c *copier) run(ctx context.Context) error {
	c.slots = make([]copySlot, len(c.mine))
	c.opSize, c.minOp = copyOp, uint64(c.q.pmtu.Bytes())
	wcs := make([]roce.WC, 64)
	for {
		for i := range c.slots {
			s := &c.slots[i]
			if !s.busy {
				if sp, ok := c.take(); ok {
					s.off, s.n, s.tries, s.busy = sp.off, uint32(sp.n), 0, true
					if err := c.post(i); err != nil {
						return err
					}
				}
			} else if time.Now().After(s.deadline) {
				// Reissued smaller: an operation arrives only if all its
				// packets do. One halving per size: operations issued
				// before it are split, not counted again.
				if uint64(s.n) <= c.opSize {
					c.opSize = max(c.opSize/2, c.minOp)
				}
				c.streak = 0
				if uint64(s.n) > c.opSize {
					c.pending = append(c.pending, copySpan{s.off + c.opSize, uint64(s.n) - c.opSize})
					s.n = uint32(c.opSize)
				}
				if err := c.post(i); err != nil {
					return err
				}
			}
		}
		if c.done == c.size {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		k, err := c.q.cq.Wait(wctx, wcs)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return ctxErr(ctx, err)
		}
		if ctx.Err() != nil {
			return ctxErr(ctx, nil)
		}
		for _, wc := range wcs[:k] {
			if err := c.complete(&wc); err != nil {
				return err
			}
		}
	}
}

// take returns the next range for an operation, of opSize bytes at most:
// from pending first, then the file's next bytes.
func (c *copier) take() (copySpan, bool) {
	if k := len(c.pending); k > 0 {
		sp := c.pending[k-1]
		c.pending = c.pending[:k-1]
		if sp.n > c.opSize {
			c.pending = append(c.pending, copySpan{sp.off + c.opSize, sp.n - c.opSize})
			sp.n = c.opSize
		}
		return sp, true
	}
	if c.next == c.size {
		return copySpan{}, false
	}
	sp := copySpan{c.next, min(c.opSize, c.size-c.next)}
	c.next += sp.n
	return sp, true
}

// complete takes one completion: a local one (the request went out) or
// the sink's, which frees its slot.
func (c *copier) complete(wc *roce.WC) error {
	if wc.Status != roce.WCSuccess {
		return fmt.Errorf("third-party READ: %v %v", wc.Opcode, wc.Status)
	}
	if wc.Opcode != roce.WCOOODelivered {
		return nil
	}
	i, tid := int(wc.ID>>32), uint32(wc.ID)
	if i >= len(c.slots) || !c.slots[i].busy || c.slots[i].tid != tid {
		c.res.StaleCompletions++
		return nil
	}
	s := &c.slots[i]
	s.busy = false
	if s.tries == 1 { // Karn: a reissue's time is ambiguous
		rtt := time.Since(s.posted)
		if c.srtt == 0 {
			c.srtt, c.rttvar = rtt, rtt/2
		} else {
			c.rttvar += (abs(c.srtt-rtt) - c.rttvar) / 4
			c.srtt += (rtt - c.srtt) / 8
		}
	}
	c.done += uint64(s.n)
	c.res.Delivered++
	if c.streak++; c.streak >= 2*len(c.slots) && c.opSize < copyOp {
		c.opSize, c.streak = min(2*c.opSize, copyOp), 0
	}
	if c.progress != nil {
		c.progress(int64(c.done), int64(c.size))
	}
	return nil
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
