package am

import (
	"errors"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/roce"
)

// Config configures an Endpoint. Both ends of a connection use the same
// Depth and Inline. The zero Config means the defaults.
type Config struct {
	// Inline is the largest payload an AM_WRITE or AM_READ_REPLY carries
	// in its SEND (default DefaultInline); longer writes and reads become
	// tagged RMA operations.
	Inline int
	// Depth bounds the requests this end has outstanding (default
	// DefaultDepth); Write and Read calls beyond it wait in the write and
	// read queues until replies come back.
	Depth int
	// MaxRMA bounds the RDMA READs and WRITEs the target has in flight for
	// the peer's tagged operations (default DefaultMaxRMA); the rest wait in
	// the RMA queue.
	MaxRMA int
	// IOVABase, when not zero, gives every region the endpoint registers
	// an I/O virtual address counted up from it (4 KiB-aligned), instead of
	// the buffer's address: for reproducible captures.
	IOVABase uint64
}

// Defaults of Config.
const (
	DefaultInline = 4096
	DefaultDepth  = 16
	DefaultMaxRMA = 4
)

func (c *Config) fill() error {
	if c.Inline == 0 {
		c.Inline = DefaultInline
	}
	if c.Depth == 0 {
		c.Depth = DefaultDepth
	}
	if c.MaxRMA == 0 {
		c.MaxRMA = DefaultMaxRMA
	}
	if c.Inline < 0 || c.Inline > 1<<20 || c.Depth < 1 || c.Depth > 1024 || c.MaxRMA < 1 || c.MaxRMA > 1024 {
		return fmt.Errorf("config: Inline %d (0..1 MiB), Depth %d (1..1024) or MaxRMA %d (1..1024) out of range",
			c.Inline, c.Depth, c.MaxRMA)
	}
	return nil
}

// QueueDepths returns what the queue pair and completion queue under an
// Endpoint with this Config need at least: MaxSendWR, MaxRecvWR and the CQ
// depth (sends and receives complete on one CQ).
func (c Config) QueueDepths() (send, recv, cq int, err error) {
	if err := c.fill(); err != nil {
		return 0, 0, 0, fmt.Errorf("am: %w", err)
	}
	send, recv = 2*c.Depth+c.MaxRMA, 2*c.Depth
	return send, recv, send + recv, nil
}

// Errors an operation's Handle.Err returns (wrapped: test with errors.Is).
var (
	ErrUnknownWindow  = errors.New("unknown window")       // the target exposes no window with that id
	ErrOutOfRange     = errors.New("outside the window")   // offset and length are not inside the window
	ErrBadRequest     = errors.New("refused as malformed") // the target could not parse the request, or a reply did not fit
	ErrUnknownHandler = errors.New("no such handler")      // Call: the target registered no handler with that id
	// ErrClosed: the endpoint was closed, or failed (Progress returned an
	// error) before the operation completed.
	ErrClosed = errors.New("endpoint closed")
)

func statusErr(s Status) error {
	switch s {
	case StatusUnknownWindow:
		return ErrUnknownWindow
	case StatusOutOfRange:
		return ErrOutOfRange
	case StatusUnknownHandler:
		return ErrUnknownHandler
	}
	return ErrBadRequest
}

// An Endpoint is one end of an active-message connection over one connected
// RC queue pair. Its methods are safe for concurrent use; nothing happens
// between calls of Progress (see the package documentation).
type Endpoint struct {
	mu  sync.Mutex
	q   epQP
	pd  epPD
	cq  *roce.CQ
	cfg Config

	iova uint64 // next IOVA (cfg.IOVABase != 0)

	msgLen int      // the largest message: header, RMA descriptor or inline data
	rbuf   *roce.MR // 2·Depth receive slots of msgLen
	sbuf   *roce.MR // 2·Depth send slots of msgLen
	sfree  []int    // free send slots

	windows  map[uint32]*window
	handlers map[Handler]HandlerFunc

	// Initiator side.
	tag      uint64         // last tag used
	writeQ   []*op          // writes not yet sent (write progress)
	readQ    []*op          // reads not yet sent (read progress)
	pending  map[uint64]*op // sent, waiting for the reply, by tag
	inflight int            // len(pending)

	// Target side.
	replies []reply  // replies waiting for a send slot
	rmaQ    []*rmaOp // tagged operations waiting for RMA progress
	rmaBusy []*rmaOp // posted, by rma slot (nil: free)
	sqUsed  int      // send work requests posted and not completed
	sqDepth int      // cfg.QueueDepths' send

	err   error // the first fatal error
	stats Stats
	wcs   [16]roce.WC
	sge   [1]roce.SGE
}

// epQP and epPD are what an Endpoint uses of a roce.QP and a roce.PD (the
// package's tests also run it over bare roce/qp queue pairs with a
// hand-driven clock, for reproducible captures).
type epQP interface {
	PostSend(wr roce.SendWR) error
	PostRecv(wr roce.RecvWR) error
}

type epPD interface {
	RegMR(buf []byte, access roce.Access) (*roce.MR, error)
	RegMRIOVA(buf []byte, iova uint64, access roce.Access) (*roce.MR, error)
}

type window struct {
	mr   *roce.MR
	busy int // RMA operations using it
}

// op is one Write or Read of the initiator.
type op struct {
	h     *Handle
	hdr   Header
	data  []byte   // Write: the data; Read: where the bytes go; Call: the payload
	mr    *roce.MR // the region registered for this tag alone (large operations)
	reply []byte   // Call: where the reply goes
}

// reply is a reply the target still has to send.
type reply struct {
	hdr  Header
	win  *window // AM_READ_REPLY: the window the data comes from
	data []byte  // AM_REPLY: the handler's reply
}

// rmaOp is a tagged RMA operation of the target: RDMA READ of the
// initiator's buffer into the window (AM_WRITE_RTS) or RDMA WRITE from the
// window into it (AM_READ with FlagRMA).
type rmaOp struct {
	hdr  Header
	desc RMADesc
	win  *window
}

// Stats counts what an endpoint did.
type Stats struct {
	RequestsSent  uint64 // AM_WRITE, AM_WRITE_RTS and AM_READ sent
	Handled       uint64 // requests of the peer its handlers ran
	RMAReads      uint64 // RDMA READs posted for AM_WRITE_RTS
	RMAWrites     uint64 // RDMA WRITEs posted for large AM_READs
	NAKsSent      uint64
	NAKsReceived  uint64
	Malformed     uint64 // received messages without an AM header (dropped)
	TagRegistered uint64 // regions registered for one tag
}

// Handle follows one Write or Read.
type Handle struct {
	ep   *Endpoint
	done bool
	err  error
	n    int // Call: the reply's length
}

// Done reports whether the operation completed (successfully or not). It
// becomes true only in a Progress call.
func (h *Handle) Done() bool {
	h.ep.mu.Lock()
	defer h.ep.mu.Unlock()
	return h.done
}

// Err is the operation's error once Done: nil, or ErrUnknownWindow,
// ErrOutOfRange, ErrBadRequest, ErrUnknownHandler or ErrClosed wrapped.
func (h *Handle) Err() error {
	h.ep.mu.Lock()
	defer h.ep.mu.Unlock()
	return h.err
}

// New makes an Endpoint over q, an RC queue pair of pd connected (RTS) to the
// peer's, whose sends and receives complete on cq, with queue sizes of at
// least cfg.QueueDepths. It registers its message buffers and posts its
// receives; the peer must have its Endpoint before this end sends (RNR
// retries cover the gap when the connection allows them).
func New(q *roce.QP, pd *roce.PD, cq *roce.CQ, cfg *Config) (*Endpoint, error) {
	return newEndpoint(q, pd, cq, cfg)
}

func newEndpoint(q epQP, pd epPD, cq *roce.CQ, cfg *Config) (*Endpoint, error) {
	ep := &Endpoint{q: q, pd: pd, cq: cq, windows: map[uint32]*window{}, handlers: map[Handler]HandlerFunc{},
		pending: map[uint64]*op{}}
	if cfg != nil {
		ep.cfg = *cfg
	}
	if err := ep.cfg.fill(); err != nil {
		return nil, fmt.Errorf("am: new endpoint: %w", err)
	}
	ep.sqDepth, _, _, _ = ep.cfg.QueueDepths()
	ep.iova = ep.cfg.IOVABase
	ep.msgLen = HeaderLen + max(rmaDescLen, ep.cfg.Inline)
	ep.rmaBusy = make([]*rmaOp, ep.cfg.MaxRMA)
	n := 2 * ep.cfg.Depth
	var err error
	if ep.rbuf, err = ep.register(make([]byte, n*ep.msgLen), roce.LocalWrite); err != nil {
		return nil, fmt.Errorf("am: new endpoint: %w", err)
	}
	if ep.sbuf, err = ep.register(make([]byte, n*ep.msgLen), 0); err != nil {
		ep.rbuf.Deregister()
		return nil, fmt.Errorf("am: new endpoint: %w", err)
	}
	for i := n - 1; i >= 0; i-- {
		ep.sfree = append(ep.sfree, i)
	}
	for i := range n {
		if err := ep.postRecv(i); err != nil {
			ep.rbuf.Deregister()
			ep.sbuf.Deregister()
			return nil, fmt.Errorf("am: new endpoint: %w", err)
		}
	}
	return ep, nil
}

// register registers buf with access, at the next IOVA when Config.IOVABase
// is set.
func (ep *Endpoint) register(buf []byte, access roce.Access) (*roce.MR, error) {
	if ep.cfg.IOVABase == 0 {
		return ep.pd.RegMR(buf, access)
	}
	a := ep.iova
	ep.iova += (uint64(len(buf)) + 0xFFF) &^ 0xFFF
	return ep.pd.RegMRIOVA(buf, a, access)
}

// Expose makes buf the window id: the peer's AM writes and reads reach it
// by id, offset and length, checked against len(buf). The window is
// registered for local access only; its keys never leave this end. The
// owner must not touch buf while operations on it may run (between
// Progress calls it is stable).
func (ep *Endpoint) Expose(id uint32, buf []byte) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if _, dup := ep.windows[id]; dup {
		return fmt.Errorf("am: expose window %d: already exposed", id)
	}
	if len(buf) == 0 {
		return fmt.Errorf("am: expose window %d: empty buffer", id)
	}
	m, err := ep.register(buf, roce.LocalWrite)
	if err != nil {
		return fmt.Errorf("am: expose window %d: %w", id, err)
	}
	ep.windows[id] = &window{mr: m}
	return nil
}

// Unexpose withdraws window id: requests naming it are refused from now on.
// It fails while a tagged RMA operation of the peer uses the window.
func (ep *Endpoint) Unexpose(id uint32) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	w := ep.windows[id]
	if w == nil {
		return fmt.Errorf("am: unexpose window %d: %w", id, ErrUnknownWindow)
	}
	if w.busy > 0 {
		return fmt.Errorf("am: unexpose window %d: %d rma operations use it", id, w.busy)
	}
	delete(ep.windows, id)
	if err := w.mr.Deregister(); err != nil {
		return fmt.Errorf("am: unexpose window %d: %w", id, err)
	}
	return nil
}

// windowKeys returns the keys of window id (for tests that check they never
// travel).
func (ep *Endpoint) windowKeys(id uint32) (lkey, rkey uint32, ok bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	w := ep.windows[id]
	if w == nil {
		return 0, 0, false
	}
	return w.mr.LKey(), w.mr.RKey(), true
}

// Write queues an AM write of data to the peer's window win at offset off.
// Data up to Config.Inline travels in the request; longer data is registered
// for this operation's tag alone and the peer RDMA-READs it. data must not
// change until the Handle is Done. Nothing is sent before Progress. After
// Close or a fatal Progress error it fails with ErrClosed.
func (ep *Endpoint) Write(win uint32, off uint64, data []byte) (*Handle, error) {
	return ep.queue(HWrite, win, off, data)
}

// Read queues an AM read of len(buf) bytes from the peer's window win at
// offset off into buf, which the operation owns until its Handle is Done.
// Up to Config.Inline bytes come back in the reply; more are RDMA-written by
// the peer into buf, registered for this operation's tag alone. Nothing is
// sent before Progress. After Close or a fatal Progress error it fails with
// ErrClosed.
func (ep *Endpoint) Read(win uint32, off uint64, buf []byte) (*Handle, error) {
	return ep.queue(HRead, win, off, buf)
}

func (ep *Endpoint) queue(h Handler, win uint32, off uint64, b []byte) (*Handle, error) {
	name := "write"
	if h == HRead {
		name = "read"
	}
	if uint64(len(b)) > roce.MaxMessage {
		return nil, fmt.Errorf("am: %s %d B: more than %d", name, len(b), roce.MaxMessage)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.err != nil {
		return nil, fmt.Errorf("am: %s: %w", name, ep.closedErr())
	}
	o := ep.newOp(Header{Handler: h, Window: win, Off: off, Len: uint32(len(b))}, b)
	if len(b) > ep.cfg.Inline {
		if h == HWrite {
			o.hdr.Handler = HWriteRTS
		} else {
			o.hdr.Flags = FlagRMA
		}
	}
	if h == HWrite {
		ep.writeQ = append(ep.writeQ, o)
	} else {
		ep.readQ = append(ep.readQ, o)
	}
	return o.h, nil
}

// newOp makes an operation with the next tag.
func (ep *Endpoint) newOp(h Header, data []byte) *op {
	ep.tag++
	h.Tag = ep.tag
	return &op{h: &Handle{ep: ep}, hdr: h, data: data}
}

// Stats returns the endpoint's counters.
func (ep *Endpoint) Stats() Stats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.stats
}

// Close fails the operations not yet complete (ErrClosed) and deregisters
// every region of the endpoint (message buffers, windows, tagged buffers).
// Destroy the queue pair first, so that no work request still uses them.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.err == nil {
		ep.err = ErrClosed
	}
	ep.failAll()
	var errs []error
	for id, w := range ep.windows {
		errs = append(errs, w.mr.Deregister())
		delete(ep.windows, id)
	}
	if ep.rbuf != nil {
		errs = append(errs, ep.rbuf.Deregister(), ep.sbuf.Deregister())
		ep.rbuf, ep.sbuf = nil, nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("am: close: %w", err)
	}
	return nil
}

// closedErr is ErrClosed, with the fatal error if that is why.
func (ep *Endpoint) closedErr() error {
	if errors.Is(ep.err, ErrClosed) {
		return ep.err
	}
	return fmt.Errorf("%w: %w", ErrClosed, ep.err)
}

// failAll completes every outstanding operation with closedErr.
func (ep *Endpoint) failAll() {
	err := ep.closedErr()
	for _, q := range [][]*op{ep.writeQ, ep.readQ} {
		for _, o := range q {
			ep.finish(o, err)
		}
	}
	ep.writeQ, ep.readQ = nil, nil
	for tag, o := range ep.pending {
		delete(ep.pending, tag)
		ep.finish(o, err)
	}
	ep.inflight = 0
}

// finish completes o with err, deregistering its tagged region.
func (ep *Endpoint) finish(o *op, err error) {
	if o.mr != nil {
		if derr := o.mr.Deregister(); err == nil && derr != nil {
			err = derr
		}
		o.mr = nil
	}
	o.h.done, o.h.err = true, err
}
