package enlarge

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	// ErrAckTimeout is wrapped by Send's error once a sending direction has
	// waited Config.MaxAckTimeouts ack timeouts for a valid ENLARGE_ACK. The
	// direction stays failed (the request is never resent); the receiving
	// direction goes on.
	ErrAckTimeout = errors.New("enlarge: send: no valid ENLARGE_ACK")
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
	Promotions      int   // completed promotions, a ring growth counted as one: sending direction (ack accepted) plus receiving direction (ack sent)
	AckRefused      int   // mailbox checks that found a head but no valid ack (missing tail, corrupt)
	AckTimeouts     int   // ack timeouts (Config.AckTimeout each) of the request out now, or of the last one
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
	wcs  [4]Completion // a batch of polled completions (4 keeps a Channel at 896 B)
	wr   WorkRequest
	ctrl [ReqLen]byte
	load [AckLen]byte

	// ackHook, set by tests only (export_test.go), sees every outgoing
	// ENLARGE_ACK before it is written to the peer and may damage it.
	ackHook func(ack []byte)
}

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
		return nil, err // "enlarge: post receive: ..."
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
