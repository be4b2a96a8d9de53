package enlarge

import (
	"errors"
	"fmt"
)

// The receiving direction of a channel: arrivals in the ring, the answer to
// an ENLARGE_REQ (new ring, ENLARGE_ACK), credit updates to the peer, and
// Recv.

type rxState struct {
	phase          int
	ring           Region
	slots          int
	slotSize       int
	recvd          uint32 // ring messages arrived in this phase
	consumed       uint32
	credited       uint32
	posted         int
	q              fifo
	creditInflight bool
	ackInflight    bool
	ackPending     bool
	ack            Ack
	grown          bool // the phase-0 ring has grown to GrowSlots
}

type entry struct {
	slot int32 // -1: data copied off a freed ring into buf
	off  int32
	n    int32
	more bool
	buf  []byte
}

// fifo is a queue of entries that allocates only to grow.
type fifo struct {
	e    []entry
	head int
	n    int
}

func (f *fifo) len() int { return f.n }
func (f *fifo) front() *entry {
	return &f.e[f.head]
}
func (f *fifo) push(e entry) {
	if f.n == len(f.e) {
		g := make([]entry, 2*len(f.e)+8)
		for i := 0; i < f.n; i++ {
			g[i] = f.e[(f.head+i)%len(f.e)]
		}
		f.e, f.head = g, 0
	}
	f.e[(f.head+f.n)%len(f.e)] = e
	f.n++
}
func (f *fifo) pop() {
	f.e[f.head] = entry{}
	f.head = (f.head + 1) % len(f.e)
	f.n--
}
func (f *fifo) at(i int) *entry { return &f.e[(f.head+i)%len(f.e)] }

// recvDepth is the number of zero-length receives a channel keeps posted
// while its receiving direction is in phase p (for phase 0, the ring it
// starts with): one per slot of its buffer plus spares for the peer's
// ENLARGE_ACK and ENLARGE_CREDIT writes.
func (c *Config) recvDepth(p int) int { return c.slots(p) + recvSpare }

const recvSpare = 4

// topUp keeps a receive posted for every slot of the current buffer plus
// the spares: every message is a WRITE_WITH_IMM, which consumes one receive
// and does not use its buffer.
func (c *Channel) topUp() error {
	for c.rx.posted < c.rx.slots+recvSpare {
		if err := c.t.PostRecv(wrID(idRecv, c.rx.phase, 0), nil, 0, 0); err != nil {
			return fmt.Errorf("enlarge: post receive: %w", err)
		}
		c.rx.posted++
	}
	return nil
}

// arrived handles one WRITE_WITH_IMM from the peer.
func (c *Channel) arrived(wc *Completion) error {
	if !wc.HasImm {
		return errors.New("enlarge: receive: write without immediate data")
	}
	kind := wc.Imm >> immKindShift
	switch kind {
	case immAck:
		// the mailbox is looked at by the next Send (checkAck)
		c.tx.ackArrived = true
		return nil
	case immCredit:
		tx := &c.tx
		if int(wc.Imm>>21&0xFF) == tx.phase&0xFF {
			d := (wc.Imm - tx.credited) & creditMask
			if d <= tx.sent-tx.credited {
				tx.credited += d
			}
		}
		return nil
	case immData, immMore, immReq:
	default:
		return fmt.Errorf("enlarge: receive: unknown message kind %d", kind)
	}
	rx := &c.rx
	slot := int(rx.recvd % uint32(rx.slots))
	rx.recvd++
	n := int(wc.Imm & immLenMask)
	if n > rx.slotSize {
		return fmt.Errorf("enlarge: receive: %d B message in a %d B slot", n, rx.slotSize)
	}
	if kind == immReq {
		return c.request(slot, n)
	}
	rx.q.push(entry{slot: int32(slot), n: int32(n), more: kind == immMore})
	return nil
}

// request handles an ENLARGE_REQ found in a ring slot: the old ring is
// unregistered and freed (messages still queued from it are copied off first),
// the larger one registered, and the ENLARGE_ACK RDMA-written to the peer's
// mailbox. A request for phase 0 asks for the grown phase-0 ring (GrowSlots
// slots of the same size), once.
func (c *Channel) request(slot, n int) error {
	rx := &c.rx
	b := rx.ring.Bytes()[slot*rx.slotSize:]
	req, ok := ParseReq(b[:n])
	grow := ok && req.Phase == 0 && rx.phase == 0 && !rx.grown && c.cfg.grows()
	if !ok || (int(req.Phase) <= rx.phase && !grow) || int(req.Phase) > c.cfg.top() || req.Size == 0 {
		c.st.ReqRefused++
		rx.consumed++ // the slot is free again
		return nil
	}
	for i := 0; i < rx.q.len(); i++ {
		e := rx.q.at(i)
		if e.slot >= 0 {
			s := int(e.slot) * rx.slotSize
			e.buf = append([]byte(nil), rx.ring.Bytes()[s+int(e.off):s+int(e.n)]...)
			e.n -= e.off
			e.off, e.slot = 0, -1
		}
	}
	if err := c.t.Deregister(rx.ring); err != nil {
		return fmt.Errorf("enlarge: promote: free ring: %w", err)
	}
	rx.ring = nil
	p := int(req.Phase)
	size, slots := c.cfg.RingBytes(p), c.cfg.slots(p)
	if grow {
		size, slots = c.cfg.GrownRingBytes(), c.cfg.GrowSlots
	}
	ring, err := c.t.Register(size)
	if err != nil {
		return fmt.Errorf("enlarge: promote to phase %d: %w", p, err)
	}
	rx.ring, rx.phase, rx.grown = ring, p, rx.grown || grow
	rx.slots, rx.slotSize = slots, c.cfg.Ladder[p]
	rx.recvd, rx.consumed, rx.credited = 0, 0, 0
	if err := c.topUp(); err != nil {
		return err
	}
	rx.ack = Ack{Addr: ring.Addr(), RKey: ring.RKey(), Length: uint32(len(ring.Bytes())), Phase: uint32(p)}
	rx.ackPending = true
	c.st.Promotions++
	if !rx.ackInflight {
		return c.postAck()
	}
	return nil
}

func (c *Channel) postAck() error {
	rx := &c.rx
	out := c.mb.Bytes()[mbOutAck : mbOutAck+AckLen]
	rx.ack.encode(out)
	if c.ackHook != nil {
		c.ackHook(out)
	}
	c.wr = WorkRequest{ID: wrID(idAck, rx.phase, 0), Op: OpWriteImm, Local: c.mb, Offset: mbOutAck, Length: AckLen,
		Imm: immAck<<immKindShift | uint32(rx.ack.Phase&0xFF), RemoteAddr: c.peer.MailboxAddr + mbAck, RKey: c.peer.MailboxRKey}
	if err := c.t.PostSend(&c.wr); err != nil {
		return fmt.Errorf("enlarge: post ENLARGE_ACK: %w", err)
	}
	rx.ackPending, rx.ackInflight = false, true
	c.st.ControlSent++
	return nil
}

// maybeCredit tells the peer how many messages of the current phase have been
// consumed (an ENLARGE_CREDIT written into its mailbox, the count also in the
// immediate data) when a quarter of the buffer's slots (at least one) has been
// consumed since the last update (half, in a phase-0 ring that may still
// grow); one update in flight at a time.
func (c *Channel) maybeCredit() error {
	rx := &c.rx
	if rx.creditInflight || rx.consumed == rx.credited {
		return nil
	}
	batch := max(1, rx.slots/4)
	if rx.phase == 0 && !rx.grown && c.cfg.grows() {
		// A quarter of a 4-slot ring is a credit per message. Half of it
		// still keeps a peer that waits for each answer (request and
		// response, one message out at a time) below the last free slot,
		// which is what makes a sender ask for the grown ring.
		batch = max(1, rx.slots/2)
	}
	if int(rx.consumed-rx.credited) < batch {
		return nil
	}
	credit{phase: uint32(rx.phase), consumed: rx.consumed}.encode(c.mb.Bytes()[mbOutCredit:])
	c.wr = WorkRequest{ID: wrID(idCredit, rx.phase, 0), Op: OpWriteImm, Local: c.mb, Offset: mbOutCredit,
		Length: CreditLen, Imm: creditImm(rx.phase, rx.consumed),
		RemoteAddr: c.peer.MailboxAddr + mbCredit, RKey: c.peer.MailboxRKey}
	if err := c.t.PostSend(&c.wr); err != nil {
		return c.fail(fmt.Errorf("enlarge: post credit: %w", err))
	}
	rx.credited, rx.creditInflight = rx.consumed, true
	c.st.CreditsSent++
	return nil
}

// Recv copies the next bytes of the next message into p without blocking.
// end is true when the message's last byte has been copied; a message that
// arrives in pieces (over the top step) may take several calls. (0, false,
// nil) means nothing has arrived.
func (c *Channel) Recv(p []byte) (n int, end bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(); err != nil {
		return 0, false, err
	}
	if err := c.progress(); err != nil {
		return 0, false, err
	}
	rx := &c.rx
	for rx.q.len() > 0 {
		e := rx.q.front()
		var src []byte
		if e.slot >= 0 {
			s := int(e.slot) * rx.slotSize
			src = rx.ring.Bytes()[s+int(e.off) : s+int(e.n)]
		} else {
			src = e.buf[e.off:e.n]
		}
		k := copy(p[n:], src)
		n += k
		e.off += int32(k)
		c.st.BytesRecv += uint64(k)
		if e.off < e.n {
			break // p is full
		}
		more, slot := e.more, e.slot
		rx.q.pop()
		if err := c.consumed(slot); err != nil {
			return n, false, err
		}
		if !more {
			c.st.MessagesRecv++
			end = true
			break
		}
	}
	if err := c.maybeCredit(); err != nil {
		return n, end, err
	}
	return n, end, nil
}

func (c *Channel) consumed(slot int32) error {
	if slot >= 0 { // not copied off a freed ring
		c.rx.consumed++
	}
	return nil
}
