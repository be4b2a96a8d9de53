package enlarge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// State is the state of one direction of a channel, as its sender sees it.
type State uint8

// States.
const (
	StateSmall     State = iota + 1 // the phase-0 eager ring
	StateRequested                  // an ENLARGE_REQ is out, no valid ENLARGE_ACK yet
	StateLarge                      // a promoted buffer (phase ≥ 1)
)

func (s State) String() string {
	switch s {
	case StateSmall:
		return "small"
	case StateRequested:
		return "requested"
	case StateLarge:
		return "large"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Errors.
var (
	// ErrClosed is returned by calls on a closed channel.
	ErrClosed = errors.New("enlarge: channel closed")
	// ErrNotConnected is returned before Connect.
	ErrNotConnected = errors.New("enlarge: channel not connected")
	// ErrShortBuffer is returned by Read when the message is longer than the
	// buffer; the rest is returned by the next Read.
	ErrShortBuffer = errors.New("enlarge: read: message longer than buffer")
	// ErrContinuation is returned by Send when a message was partly sent and
	// the next call does not start with exactly its remainder.
	ErrContinuation = errors.New("enlarge: send: remainder of a partly sent message expected")
	// ErrTransport wraps failed work completions.
	ErrTransport = errors.New("enlarge: work request failed")
)

// Endpoint is what the peer needs to know about this end (exchanged out of
// band together with the queue pair numbers).
type Endpoint struct {
	RingAddr    uint64 // the phase-0 receive ring
	RingRKey    uint32
	MailboxAddr uint64
	MailboxRKey uint32
}

// Stats are a channel end's counters.
type Stats struct {
	SendPhase       int   // phase of the direction this end sends on
	SendState       State // state of that direction
	RecvPhase       int   // phase of the direction this end receives on
	RegisteredBytes int   // bytes this end has registered now (ring, mailbox, send buffers; not the shared Pool)
	ControlSent     int   // ENLARGE_REQ and ENLARGE_ACK sent
	CreditsSent     int   // credit updates RDMA-written to the peer
	Promotions      int   // completed promotions: sending direction (ack accepted) plus receiving direction (ack sent)
	AckRefused      int   // mailbox checks that found a head but no valid ack (missing tail, corrupt)
	ReqRefused      int   // malformed or out-of-range requests received and ignored
	MessagesSent    uint64
	MessagesRecv    uint64
	BytesSent       uint64
	BytesRecv       uint64
}

// work request id: kind<<56 | phase<<48 | index
const (
	idRing   = 1
	idAck    = 2
	idCredit = 3
	idRecv   = 4
)

func wrID(kind, phase, idx int) uint64 {
	return uint64(kind)<<56 | uint64(phase)<<48 | uint64(uint32(idx))
}
func idKind(id uint64) int  { return int(id >> 56) }
func idPhase(id uint64) int { return int(id>>48) & 0xFF }
func idIndex(id uint64) int { return int(uint32(id)) }

// Channel is one end of a message channel over one RC connection. Both
// directions start with a small eager ring and promote independently.
// Methods are safe for concurrent use (one Send/Write and one Recv/Read at a
// time make sense; they are serialised internally).
type Channel struct {
	mu        sync.Mutex
	t         Transport
	pool      *Pool
	cfg       Config
	mb        Region
	peer      Endpoint
	connected bool
	closed    bool
	err       error

	tx   txState
	rx   rxState
	st   Stats
	wcs  [8]Completion
	wr   WorkRequest
	ctrl [ReqLen]byte
	load [AckLen]byte
}

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
}

type oldStage struct {
	r     Region
	phase int
	busy  int
}

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

// New creates a channel end over t: it registers the phase-0 receive ring
// (RingSlots × Ladder[0]) and the mailbox, and posts zero-length receives
// (one per ring slot plus spares) for the peer's WRITE_WITH_IMMs.
// Eager sends are staged in pool, which must share t's protection domain and
// have slots of at least Ladder[0] bytes. Connect it before use.
func New(t Transport, pool *Pool, cfg *Config) (*Channel, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if pool == nil || pool.SlotSize() < c.Ladder[0] {
		return nil, fmt.Errorf("enlarge: new: pool with slots of at least %d B required: %w", c.Ladder[0], ErrConfig)
	}
	ch := &Channel{t: t, pool: pool, cfg: c}
	ch.tx.state = StateSmall
	ch.tx.slots, ch.tx.slotSize = c.RingSlots, c.Ladder[0]
	if ch.mb, err = t.Register(MailboxLen); err != nil {
		return nil, fmt.Errorf("enlarge: new: mailbox: %w", err)
	}
	if ch.rx.ring, err = t.Register(c.RingSlots * c.Ladder[0]); err != nil {
		t.Deregister(ch.mb)
		return nil, fmt.Errorf("enlarge: new: ring: %w", err)
	}
	ch.rx.slots, ch.rx.slotSize = c.RingSlots, c.Ladder[0]
	if err := ch.topUp(); err != nil {
		ch.release()
		return nil, fmt.Errorf("enlarge: new: %w", err)
	}
	return ch, nil
}

// Endpoint returns what the peer's Connect needs (the zero Endpoint once
// closed).
func (c *Channel) Endpoint() Endpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.rx.ring == nil {
		return Endpoint{}
	}
	return Endpoint{RingAddr: c.rx.ring.Addr(), RingRKey: c.rx.ring.RKey(),
		MailboxAddr: c.mb.Addr(), MailboxRKey: c.mb.RKey()}
}

// Connect records the peer's endpoint. The queue pair must already be
// connected (RTS).
func (c *Channel) Connect(peer Endpoint) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.peer, c.connected = peer, true
	c.tx.raddr, c.tx.rkey = peer.RingAddr, peer.RingRKey
	return nil
}

// Config returns the channel's configuration with defaults filled in.
func (c *Channel) Config() Config { return c.cfg }

// Stats returns the channel's counters.
func (c *Channel) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.SendPhase, s.SendState, s.RecvPhase = c.tx.phase, c.tx.state, c.rx.phase
	s.RegisteredBytes = c.registered()
	return s
}

func (c *Channel) registered() int {
	n := 0
	for _, r := range []Region{c.mb, c.rx.ring, c.tx.stage} {
		if r != nil {
			n += len(r.Bytes())
		}
	}
	for _, o := range c.tx.old {
		n += len(o.r.Bytes())
	}
	return n
}

func (c *Channel) ready() error {
	if c.closed {
		return ErrClosed
	}
	if c.err != nil {
		return c.err
	}
	if !c.connected {
		return ErrNotConnected
	}
	return nil
}

// Progress polls completions and does the work they call for: it queues
// arrived messages, answers ENLARGE_REQs (freeing the old ring, registering
// the larger one, RDMA-writing the ENLARGE_ACK), returns send buffers and
// writes credit updates. Send and Recv call it; call it when doing neither.
func (c *Channel) Progress() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(); err != nil {
		return err
	}
	return c.progress()
}

func (c *Channel) fail(err error) error {
	if c.err == nil {
		c.err = err
	}
	return c.err
}

func (c *Channel) progress() error {
	for {
		n, err := c.t.Poll(c.wcs[:])
		if err != nil {
			return c.fail(fmt.Errorf("enlarge: poll: %w", err))
		}
		for i := 0; i < n; i++ {
			if err := c.complete(&c.wcs[i]); err != nil {
				return c.fail(err)
			}
		}
		if n < len(c.wcs) {
			break
		}
	}
	if c.rx.ackPending && !c.rx.ackInflight {
		if err := c.postAck(); err != nil {
			return c.fail(err)
		}
	}
	return c.maybeCredit()
}

func (c *Channel) complete(wc *Completion) error {
	if wc.Status != "" {
		return fmt.Errorf("%w: %s (wr kind %d phase %d)", ErrTransport, wc.Status, idKind(wc.ID), idPhase(wc.ID))
	}
	switch wc.Kind {
	case CompSend:
		switch idKind(wc.ID) {
		case idRing:
			p := idPhase(wc.ID)
			switch {
			case p == 0:
				c.pool.put(idIndex(wc.ID))
			case p == c.tx.phase:
				c.tx.completed++
			default:
				return c.oldDone(p)
			}
		case idAck:
			c.rx.ackInflight = false
		case idCredit:
			c.rx.creditInflight = false
		}
		return nil
	case CompRecvImm:
		c.rx.posted--
		if err := c.topUp(); err != nil {
			return err
		}
		return c.arrived(wc)
	}
	return fmt.Errorf("enlarge: unexpected completion kind %d", wc.Kind)
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

// recvDepth is the number of zero-length receives a channel keeps posted
// while its receiving direction is in phase p: one per slot of its buffer
// plus spares for the peer's ENLARGE_ACK and ENLARGE_CREDIT writes.
func (c *Config) recvDepth(p int) int { return c.slots(p) + recvSpare }

const recvSpare = 4

// topUp keeps RecvDepth zero-length receives posted: every message is a
// WRITE_WITH_IMM, which consumes one receive and does not use its buffer.
func (c *Channel) topUp() error {
	for c.rx.posted < c.cfg.recvDepth(c.rx.phase) {
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
// mailbox.
func (c *Channel) request(slot, n int) error {
	rx := &c.rx
	b := rx.ring.Bytes()[slot*rx.slotSize:]
	req, ok := ParseReq(b[:n])
	if !ok || int(req.Phase) <= rx.phase || int(req.Phase) > c.cfg.top() || req.Size == 0 {
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
	ring, err := c.t.Register(c.cfg.RingBytes(p))
	if err != nil {
		return fmt.Errorf("enlarge: promote to phase %d: %w", p, err)
	}
	rx.ring, rx.phase = ring, p
	rx.slots, rx.slotSize = c.cfg.slots(p), c.cfg.Ladder[p]
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
	if ackHook != nil {
		ackHook(out)
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

// ackHook, when set by a test, may damage an outgoing ENLARGE_ACK.
var ackHook func(ack []byte)

// maybeCredit tells the peer how many messages of the current phase have been
// consumed (an ENLARGE_CREDIT written into its mailbox, the count also in the
// immediate data) when a quarter of the buffer's slots (at least one) has been
// consumed since the last update; one update in flight at a time.
func (c *Channel) maybeCredit() error {
	rx := &c.rx
	if rx.creditInflight || rx.consumed == rx.credited {
		return nil
	}
	batch := max(1, rx.slots/4)
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

// Send sends the elements of iov in order, each as one message, without
// blocking, and returns the number of bytes transferred. Every element is
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
func (c *Channel) Send(iov [][]byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(); err != nil {
		return 0, err
	}
	if err := c.progress(); err != nil {
		return 0, err
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
			ok, err := c.checkAck()
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
	c.st.ControlSent++
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
	if !ok || int(a.Phase) != p || int(a.Length) != c.cfg.RingBytes(p) || a.RKey == 0 || a.Addr+uint64(a.Length) < a.Addr {
		c.st.AckRefused++
		return false, nil
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

// Close deregisters the channel's memory and gives back the pool slots of
// sends whose completions it can still poll. Destroy the queue pair (or let it
// go quiet) first: its outstanding work requests then complete, flushed, and
// their slots return to the pool.
func (c *Channel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	for {
		n, err := c.t.Poll(c.wcs[:])
		for _, wc := range c.wcs[:n] {
			if wc.Kind == CompSend && idKind(wc.ID) == idRing && idPhase(wc.ID) == 0 {
				c.pool.put(idIndex(wc.ID))
			}
		}
		if err != nil || n < len(c.wcs) {
			break
		}
	}
	return c.release()
}

func (c *Channel) release() error {
	var first error
	for _, o := range c.tx.old {
		if err := c.t.Deregister(o.r); err != nil && first == nil {
			first = fmt.Errorf("enlarge: close: %w", err)
		}
	}
	c.tx.old = nil
	for _, r := range []*Region{&c.mb, &c.rx.ring, &c.tx.stage} {
		if *r != nil {
			if err := c.t.Deregister(*r); err != nil && first == nil {
				first = fmt.Errorf("enlarge: close: %w", err)
			}
			*r = nil
		}
	}
	return first
}
