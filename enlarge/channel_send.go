package enlarge

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"time"
)

// The sending direction of a channel: eager writes into the peer's ring,
// ENLARGE_REQ, the wait for the peer's ENLARGE_ACK and the promotion of the
// send buffer.

type txState struct {
	phase    int
	state    State
	reqPhase int
	// peer's buffer for phase ≥ 1
	raddr    uint64
	rkey     uint32
	slots    int
	slotSize int
	sent     uint32 // ring messages posted in this phase
	credited uint32 // peer's consumed count seen for this phase
	// an ENLARGE_ACK write has completed into the mailbox (phase in its immediate data)
	ackArrived bool
	// own send buffer for phase ≥ 1
	stage     Region
	completed uint32     // ring writes completed in this phase
	old       []oldStage // earlier phases' send buffers, freed when their writes complete
	msgRemain int        // bytes of a partly sent message still to send
	reqAt     time.Time  // when the ENLARGE_REQ out now was posted
	err       error      // the direction failed (ErrAckTimeout)
	grown     bool       // the peer's phase-0 ring has grown to GrowSlots
}

type oldStage struct {
	r     Region
	phase int
	busy  int
}

// Send sends the elements of iov in order, each as one message, without
// waiting for the peer (except for an ENLARGE_ACK's tail, up to TailTimeout:
// see checkAck), and returns the number of bytes transferred. Every element is
// checked against the threshold (Threshold % of the current slot). Elements
// that fit go at once (eagerly) while ring credits and staging last. At the
// first element that does not fit, when no request is out, an ENLARGE_REQ for
// the phase the largest remaining element needs goes into the ring instead
// and Send returns what it sent before that element: 0 bytes for it, no
// error. From then on nothing more goes into the old ring: calls return 0
// bytes until a complete, well-formed ENLARGE_ACK is in the mailbox (the
// request is never sent twice). Then the send buffer is promoted and data
// goes by RDMA WRITE_WITH_IMM into the peer's larger buffer. An element over
// the top step's threshold goes in pieces of the top step; if only some
// pieces fit now, Send counts them, and the next call must start with the
// rest of that element (ErrContinuation otherwise). Empty elements are
// skipped.
//
// With Config.WholeVectorLarge, an oversize element anywhere in iov makes
// Send promote first: the ENLARGE_REQ (for the largest element) goes at once
// and nothing of iov is sent, 0 bytes, until the promotion is done; then
// the whole vector goes over the larger buffer.
//
// A request left without a valid ack for Config.MaxAckTimeouts ack timeouts
// fails the direction: Send returns an error wrapping ErrAckTimeout.
func (c *Channel) Send(iov [][]byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(); err != nil {
		return 0, err
	}
	if c.tx.err != nil {
		return 0, c.tx.err
	}
	if err := c.progress(); err != nil {
		return 0, err
	}
	if c.cfg.WholeVectorLarge {
		if ok, err := c.promoteFirst(iov); !ok {
			return 0, err
		}
	}
	n := 0
	tx := &c.tx
	for i, e := range iov {
		if tx.msgRemain > 0 {
			if i != 0 || len(e) != tx.msgRemain {
				return n, fmt.Errorf("%w (%d B, got %d B)", ErrContinuation, tx.msgRemain, len(e))
			}
			k, done, err := c.sendPieces(e)
			n += k
			if err != nil || !done {
				return n, err
			}
			continue
		}
		if len(e) == 0 {
			continue
		}
		if tx.state == StateRequested {
			ok, err := c.awaitAck()
			if err != nil || !ok {
				return n, err
			}
		}
		if len(e) <= c.cfg.threshold(tx.phase) {
			ok, err := c.post(e, immData)
			if err != nil || !ok {
				return n, err
			}
			n += len(e)
			continue
		}
		if tx.phase < c.cfg.top() {
			need := len(e)
			for _, f := range iov[i+1:] {
				need = max(need, len(f))
			}
			_, err := c.sendReq(c.cfg.phaseFor(need), need)
			return n, err
		}
		k, done, err := c.sendPieces(e)
		n += k
		if err != nil || !done {
			return n, err
		}
	}
	return n, nil
}

// promoteFirst is Send's start with Config.WholeVectorLarge: while an
// element of iov is over the current phase's threshold (below the top step),
// it requests (or waits for) the phase the largest element needs. ok is true
// when every element fits the current phase, or the top step has been
// reached.
func (c *Channel) promoteFirst(iov [][]byte) (ok bool, err error) {
	tx := &c.tx
	need := 0
	for _, e := range iov {
		need = max(need, len(e))
	}
	for tx.phase < c.cfg.top() && need > c.cfg.threshold(tx.phase) {
		if tx.state != StateRequested {
			_, err := c.sendReq(c.cfg.phaseFor(need), need)
			return false, err
		}
		if ok, err := c.awaitAck(); !ok {
			return false, err
		}
	}
	return true, nil
}

// sendPieces sends e (or its unsent rest) in pieces of the current slot.
func (c *Channel) sendPieces(e []byte) (int, bool, error) {
	tx := &c.tx
	off := 0
	for off < len(e) {
		k := min(len(e)-off, tx.slotSize)
		kind := immMore
		if off+k == len(e) {
			kind = immData
		}
		ok, err := c.post(e[off:off+k], kind)
		if err != nil {
			return off, false, err
		}
		if !ok {
			if off > 0 {
				tx.msgRemain = len(e) - off
			}
			return off, false, nil
		}
		off += k
	}
	tx.msgRemain = 0
	return off, true, nil
}

func (c *Channel) sendReq(phase, need int) (bool, error) {
	tx := &c.tx
	// a stale ack from an earlier promotion must not be taken for this one
	clear(c.mb.Bytes()[mbAck : mbAck+AckLen])
	tx.ackArrived = false
	Req{Phase: uint32(phase), Size: uint32(min(need, 1<<32-1))}.encode(c.ctrl[:])
	ok, err := c.post(c.ctrl[:], immReq)
	if err != nil || !ok {
		return false, err
	}
	tx.state, tx.reqPhase = StateRequested, phase
	tx.reqAt = time.Now()
	c.st.ControlSent++
	c.st.AckTimeouts = 0
	return true, nil
}

// post writes one ring message (data, piece or ENLARGE_REQ) into the next
// slot of the peer's buffer. ok is false when the peer has no free slot or
// there is no staging now.
func (c *Channel) post(b []byte, kind uint32) (bool, error) {
	tx := &c.tx
	if tx.sent-tx.credited >= uint32(tx.slots) {
		return false, nil
	}
	if kind != immReq && tx.phase == 0 && !tx.grown && tx.state == StateSmall && c.cfg.grows() &&
		tx.sent-tx.credited == uint32(tx.slots)-1 {
		// The last free slot of the small ring: ask for the grown ring in it
		// instead of this message, which waits for the ack like any other.
		_, err := c.sendReq(0, len(b))
		return false, err
	}
	slot := int(tx.sent % uint32(tx.slots))
	c.wr = WorkRequest{Op: OpWriteImm, Length: len(b), Imm: makeImm(kind, len(b)),
		RemoteAddr: tx.raddr + uint64(slot*tx.slotSize), RKey: tx.rkey}
	if tx.phase == 0 {
		i, ok := c.pool.get()
		if !ok {
			return false, nil
		}
		copy(c.pool.slot(i), b)
		c.wr.ID, c.wr.Local, c.wr.Offset = wrID(idRing, 0, i), c.pool.r, i*c.pool.size
		if err := c.t.PostSend(&c.wr); err != nil {
			c.pool.put(i)
			return false, c.fail(fmt.Errorf("enlarge: post write: %w", err))
		}
	} else {
		if tx.sent-tx.completed >= uint32(tx.slots) {
			return false, nil
		}
		copy(tx.stage.Bytes()[slot*tx.slotSize:], b)
		c.wr.ID, c.wr.Local, c.wr.Offset = wrID(idRing, tx.phase, slot), tx.stage, slot*tx.slotSize
		if err := c.t.PostSend(&c.wr); err != nil {
			return false, c.fail(fmt.Errorf("enlarge: post write: %w", err))
		}
	}
	tx.sent++
	if kind != immReq {
		c.st.BytesSent += uint64(len(b))
	}
	if kind == immData {
		c.st.MessagesSent++
	}
	return true, nil
}

// awaitAck is checkAck with the count of ack timeouts: when no valid ack is
// there, it counts the Config.AckTimeout periods since the request and fails
// the direction (ErrAckTimeout) at Config.MaxAckTimeouts of them.
func (c *Channel) awaitAck() (bool, error) {
	ok, err := c.checkAck()
	if ok || err != nil || c.cfg.MaxAckTimeouts < 0 {
		return ok, err
	}
	c.st.AckTimeouts = int(time.Since(c.tx.reqAt) / c.cfg.AckTimeout)
	if c.st.AckTimeouts < c.cfg.MaxAckTimeouts {
		return false, nil
	}
	seen := "none arrived"
	if c.tx.ackArrived {
		seen = "one arrived but is incomplete or malformed"
	}
	c.tx.err = fmt.Errorf("%w for phase %d after %d ack timeouts of %v (%s)",
		ErrAckTimeout, c.tx.reqPhase, c.st.AckTimeouts, c.cfg.AckTimeout, seen)
	return false, c.tx.err
}

// checkAck looks at the mailbox: head first, then (for at most TailTimeout)
// the tail, then the whole record. Only a complete, well-formed ack for the
// requested phase with a buffer of the right length promotes the send side.
func (c *Channel) checkAck() (bool, error) {
	tx := &c.tx
	if !tx.ackArrived {
		return false, nil // nothing written into the mailbox yet
	}
	b := c.load[:]
	c.t.Load(c.mb, mbAck, b[:8])
	if !headOK(b[:8], TypeAck) {
		c.st.AckRefused++
		return false, nil
	}
	var deadline time.Time
	for spins := 0; ; spins++ {
		c.t.Load(c.mb, mbAck+28, b[28:32])
		if binary.BigEndian.Uint32(b[28:]) == TailFlag {
			break
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.cfg.TailTimeout)
		} else if now.After(deadline) {
			c.st.AckRefused++
			return false, nil
		}
		runtime.Gosched()
	}
	c.t.Load(c.mb, mbAck, b)
	a, ok := ParseAck(b)
	p := tx.reqPhase
	size := c.cfg.RingBytes(p)
	if p == 0 {
		size = c.cfg.GrownRingBytes()
	}
	if !ok || int(a.Phase) != p || int(a.Length) != size || a.RKey == 0 || a.Addr+uint64(a.Length) < a.Addr {
		c.st.AckRefused++
		return false, nil
	}
	if p == 0 {
		// The grown ring: staged from the pool as before, only more slots.
		clear(c.mb.Bytes()[mbAck : mbAck+AckLen])
		tx.ackArrived, tx.grown = false, true
		tx.state = StateSmall
		tx.raddr, tx.rkey = a.Addr, a.RKey
		tx.slots = c.cfg.GrowSlots
		tx.sent, tx.credited, tx.completed = 0, 0, 0
		c.st.Promotions++
		return true, nil
	}
	stage, err := c.t.Register(c.cfg.RingBytes(p))
	if err != nil {
		return false, c.fail(fmt.Errorf("enlarge: promote send buffer to phase %d: %w", p, err))
	}
	if tx.stage != nil {
		// the previous large send buffer goes once its writes complete
		if busy := int(tx.sent - tx.completed); busy > 0 {
			tx.old = append(tx.old, oldStage{r: tx.stage, phase: tx.phase, busy: busy})
		} else if err := c.t.Deregister(tx.stage); err != nil {
			return false, c.fail(fmt.Errorf("enlarge: promote: free send buffer: %w", err))
		}
	}
	clear(c.mb.Bytes()[mbAck : mbAck+AckLen])
	tx.ackArrived = false
	tx.stage = stage
	tx.phase, tx.state = p, StateLarge
	tx.raddr, tx.rkey = a.Addr, a.RKey
	tx.slots, tx.slotSize = c.cfg.slots(p), c.cfg.Ladder[p]
	tx.sent, tx.credited, tx.completed = 0, 0, 0
	c.st.Promotions++
	return true, nil
}

// oldDone counts a completed write from an earlier phase's send buffer and
// frees the buffer after its last one.
func (c *Channel) oldDone(phase int) error {
	for i := range c.tx.old {
		o := &c.tx.old[i]
		if o.phase != phase {
			continue
		}
		if o.busy--; o.busy > 0 {
			return nil
		}
		err := c.t.Deregister(o.r)
		c.tx.old = append(c.tx.old[:i], c.tx.old[i+1:]...)
		if err != nil {
			return fmt.Errorf("enlarge: free send buffer: %w", err)
		}
		return nil
	}
	return fmt.Errorf("enlarge: completion for a phase-%d send buffer that is not waiting", phase)
}
