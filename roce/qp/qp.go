package qp

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// Limits and defaults of Config.
const (
	DefaultMaxWR      = 256  // MaxSendWR, MaxRecvWR when 0
	DefaultMaxSGE     = 4    // MaxSGE when 0
	DefaultMaxInline  = 64   // MaxInline when 0 (-1 disables inline data)
	DefaultSendWindow = 1024 // SendWindow when 0
	MaxWR             = 1 << 15
	MaxSGELimit       = 32
	MaxInlineLimit    = 4096
	MaxRdAtomicLimit  = 16 // MaxRdAtomic and MaxDestRdAtomic
	MaxMessage        = 1 << 31
	GRHLen            = 40 // the GRH area at the start of a UD receive buffer
	defaultUDMTU      = wire.MTU1024
)

// DefaultSRSendWindow is Config.SendWindow when 0 and the peer agreed on
// selective repeat (AttrSelectiveRepeat) and DCQCN (AttrDCQCN): what its
// responder holds past a hole (SRHold), so that a lost packet costs its
// resend alone, and the window fills less often (docs/status.md, "lmrm get
// against the READ get"). Without DCQCN nothing cuts the window on
// congestion, and twice the window is twice the overflow at a congested
// queue: such a queue pair keeps DefaultSendWindow (docs/status.md, "the
// SR window without congestion control").
const DefaultSRSendWindow = SRHold

// Sentinel errors of PostSend, PostRecv and Modify.
var (
	// ErrState: the queue pair is not in a state that allows the call (a
	// send before RTS, a receive in RESET, a transition ibverbs forbids).
	ErrState = errors.New("qp: wrong state")
	// ErrQueueFull: the send or receive queue holds MaxSendWR/MaxRecvWR
	// outstanding work requests; retry after polling completions.
	ErrQueueFull = errors.New("qp: queue full")
	// ErrDestroyed: the queue pair was destroyed.
	ErrDestroyed = errors.New("qp: destroyed")
)

// callError is a sentinel error of this package returned by a call, with the
// call's context in front: its text names the package once ("qp: post recv:
// destroyed", not "qp: post recv: qp: destroyed") and errors.Is finds the
// sentinel.
type callError struct {
	msg string
	err error
}

func (e *callError) Error() string { return e.msg }
func (e *callError) Unwrap() error { return e.err }

// wrap puts context (which starts with "qp: ") in front of sentinel.
func wrap(sentinel error, context string) error {
	return &callError{msg: context + ": " + strings.TrimPrefix(sentinel.Error(), "qp: "), err: sentinel}
}

// Config describes a queue pair for New.
type Config struct {
	Type           Type
	PD             *mr.PD
	Table          *mr.Table // nil: the PD's table
	SendCQ, RecvCQ *CQ
	MaxSendWR      int // outstanding send WRs (0: DefaultMaxWR)
	MaxRecvWR      int // outstanding receive WRs (0: DefaultMaxWR)
	MaxSGE         int // SGEs per WR (0: DefaultMaxSGE)
	MaxInline      int // inline bytes per send WR (0: DefaultMaxInline; -1: none)
	QPN            uint32
	// SendWindow bounds the unacknowledged PSNs of an RC requester (0:
	// DefaultSendWindow, DefaultSRSendWindow with selective repeat and
	// DCQCN). A
	// READ counts one PSN per response packet.
	SendWindow int
	// FixedWindow keeps the send window at SendWindow; by default it halves
	// on loss and grows back (see the package documentation).
	FixedWindow bool
	// DCQCN holds the parameters of DCQCN for an RC queue pair connected
	// with Attr.DCQCN (zero fields: DefaultDCQCN; docs/cc.md).
	DCQCN DCQCNParams
	// Contexts is the device's OOO context pool (Type OOO only, required).
	Contexts *ContextPool
	// SRQ: the queue pair receives on this shared receive queue (RC and UD;
	// same PD) instead of its own; MaxRecvWR is then ignored.
	SRQ *SRQ
}

// A QP is a queue pair. See the package documentation for which methods may
// be called from which goroutine.
type QP struct {
	typ       Type
	qpn       uint32
	pd        *mr.PD
	tbl       *mr.Table
	scq, rcq  *CQ
	maxSendWR int
	maxRecvWR int
	maxSGE    int
	maxInline int
	window    uint32
	winAuto   bool // Config.SendWindow was 0: DefaultSRSendWindow with selective repeat and DCQCN
	fixedWin  bool
	dcqcn     *DCQCNParams // Config.DCQCN (nil: all defaults)

	// Application side, guarded by mu.
	mu        sync.Mutex
	state     State
	attr      Attr
	ctl       ctlRequest
	sqPost    uint32
	rqPost    uint32
	destroyed bool

	doorbell atomic.Pointer[func()]
	ctlGen   atomic.Uint32
	sqPosted atomic.Uint32 // send WQEs posted (free-running)
	sqDone   atomic.Uint32 // send WQEs retired by the engine
	rqPosted atomic.Uint32
	rqDone   atomic.Uint32

	// Rings (ring.go). A slot belongs to the poster between sqDone and
	// sqPost, to the engine between sqDone and sqPosted.
	sq atomic.Pointer[wqeRing[sendWQE]]
	rq atomic.Pointer[wqeRing[recvWQE]]

	// Engine side: owned by the progress goroutine.
	e    engine
	req  requester
	comp completer
	resp responder
	win  sendWindow // RC: the requester's window, its timers, loss recovery
	np   notifier   // RC with DCQCN: the CNPs due (cc.go)
	ooo  *oooEngine // OOO only
	// The regions the data path last touched (mr.Cache): the packets of a
	// message name one key, so most skip the table's lock and map.
	lkeyCache, rkeyCache mr.Cache

	srqRecv srqRecv    // on an SRQ: the WQE of the message in progress
	plc     placeState // direct placement through the xdproce daemon (place.go)

	stats Stats
}

// ctlRequest carries what Modify did since the engine last looked.
type ctlRequest struct {
	reset          bool
	sqMark, rqMark uint32 // WQEs posted before the reset: discarded
	toError        bool
}

// New creates a queue pair in RESET.
func New(cfg Config) (*QP, error) {
	if cfg.Type < RC || cfg.Type > OOO {
		return nil, fmt.Errorf("qp: new: invalid type %v", cfg.Type)
	}
	if cfg.Type == OOO && cfg.Contexts == nil {
		return nil, errors.New("qp: new: an OOO queue pair needs the device's context pool")
	}
	if cfg.PD == nil {
		return nil, errors.New("qp: new: no protection domain")
	}
	if cfg.Table == nil {
		cfg.Table = cfg.PD.Table()
	} else if cfg.Table != cfg.PD.Table() {
		return nil, errors.New("qp: new: the protection domain belongs to another table")
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, errors.New("qp: new: send and receive completion queues are required")
	}
	if cfg.QPN == 0 || (cfg.QPN == 1 && cfg.Type != UD) || cfg.QPN > wire.PSNMask {
		return nil, fmt.Errorf("qp: new: invalid QPN %#x (2..0xffffff; 1 only for the UD GSI queue pair)", cfg.QPN)
	}
	def := func(v *int, d, limit int, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 || *v > limit {
			return fmt.Errorf("qp: new: %s %d out of range 1..%d", name, *v, limit)
		}
		return nil
	}
	if cfg.MaxInline == -1 {
		cfg.MaxInline = 0
	} else if err := def(&cfg.MaxInline, DefaultMaxInline, MaxInlineLimit, "MaxInline"); err != nil {
		return nil, err
	}
	if err := def(&cfg.MaxSendWR, DefaultMaxWR, MaxWR, "MaxSendWR"); err != nil {
		return nil, err
	}
	if err := def(&cfg.MaxRecvWR, DefaultMaxWR, MaxWR, "MaxRecvWR"); err != nil {
		return nil, err
	}
	if err := def(&cfg.MaxSGE, DefaultMaxSGE, MaxSGELimit, "MaxSGE"); err != nil {
		return nil, err
	}
	winAuto := cfg.SendWindow == 0
	if err := def(&cfg.SendWindow, DefaultSendWindow, 1<<22, "SendWindow"); err != nil {
		return nil, err
	}
	if err := cfg.DCQCN.check(); err != nil {
		return nil, fmt.Errorf("qp: new: %w", err)
	}
	if cfg.SRQ != nil {
		if cfg.Type != RC && cfg.Type != UD {
			return nil, fmt.Errorf("qp: new: a %v queue pair on a shared receive queue", cfg.Type)
		}
		cfg.MaxRecvWR = 1 // the SRQ holds the receive WQEs
		if err := cfg.SRQ.attach(cfg.PD); err != nil {
			return nil, fmt.Errorf("qp: new: %w", err)
		}
	}
	if err := cfg.PD.Hold(); err != nil {
		if cfg.SRQ != nil {
			cfg.SRQ.detach()
		}
		return nil, fmt.Errorf("qp: new: %w", err)
	}
	q := &QP{
		typ: cfg.Type, qpn: cfg.QPN, pd: cfg.PD, tbl: cfg.Table, scq: cfg.SendCQ, rcq: cfg.RecvCQ,
		maxSendWR: cfg.MaxSendWR, maxRecvWR: cfg.MaxRecvWR, maxSGE: cfg.MaxSGE,
		maxInline: cfg.MaxInline, window: uint32(cfg.SendWindow), winAuto: winAuto, fixedWin: cfg.FixedWindow,
		state: Reset,
	}
	if p := cfg.DCQCN; p != (DCQCNParams{}) {
		q.dcqcn = &p
	}
	if cfg.Type == OOO {
		q.ooo = &oooEngine{pool: cfg.Contexts}
	}
	q.sq.Store(newRing(q.newSendWQEs(firstRing(cfg.MaxSendWR))))
	q.rq.Store(newRing(q.newRecvWQEs(firstRing(cfg.MaxRecvWR))))
	if cfg.SRQ != nil {
		q.srqRecv.srq = cfg.SRQ
		q.srqRecv.cur.sglBuf = make([]mr.SGE, cfg.SRQ.maxSGE)
	}
	q.e.state = Reset
	q.initEngines()
	return q, nil
}

func ringSize(n int) int { return 1 << bits.Len(uint(n-1)) }

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the transport type.
func (q *QP) Type() Type { return q.typ }

// State returns the state as the application sees it (the engine catches up
// with Modify on its next run; an engine-detected error shows at once).
func (q *QP) State() State {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Query returns the current state and attributes.
func (q *QP) Query() (State, Attr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state, q.attr
}

// SetDoorbell sets the function Post*/Modify call so that the engine runs
// soon (nil: none). It must not block.
func (q *QP) SetDoorbell(f func()) {
	if f == nil {
		q.doorbell.Store(nil)
		return
	}
	q.doorbell.Store(&f)
}

func (q *QP) ring() {
	if f := q.doorbell.Load(); f != nil {
		(*f)()
	}
}

// Destroy releases the queue pair's hold on its PD. Later posts fail with
// ErrDestroyed; the device must stop calling Receive and Progress.
func (q *QP) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return wrap(ErrDestroyed, "qp: destroy")
	}
	q.destroyed = true
	q.mu.Unlock()
	if q.ooo != nil {
		q.ooo.pool.ReleaseAll(q.qpn)
	}
	if s := q.srqRecv.srq; s != nil {
		s.detach()
	}
	q.pd.Release()
	return nil
}

func checkAttr(a *Attr, mask AttrMask) error {
	bad := func(name string, v any) error { return fmt.Errorf("qp: modify: %s %v out of range", name, v) }
	switch {
	case mask&AttrPathMTU != 0 && !a.PathMTU.Valid():
		return bad("path MTU", a.PathMTU)
	case mask&AttrDestQPN != 0 && (a.DestQPN > wire.PSNMask || a.DestQPN == 0):
		return bad("dest QPN", a.DestQPN)
	case mask&AttrRQPSN != 0 && a.RQPSN > wire.PSNMask:
		return bad("rq_psn", a.RQPSN)
	case mask&AttrSQPSN != 0 && a.SQPSN > wire.PSNMask:
		return bad("sq_psn", a.SQPSN)
	case mask&AttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout", a.Timeout)
	case mask&AttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry_cnt", a.RetryCnt)
	case mask&AttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("rnr_retry", a.RNRRetry)
	case mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min_rnr_timer", a.MinRNRTimer)
	case mask&AttrMaxRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomicLimit:
		return bad("max_rd_atomic", a.MaxRdAtomic)
	case mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomicLimit:
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	case mask&AttrAccessFlags != 0 && a.Access&^(mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic) != 0:
		return bad("access flags", a.Access)
	}
	if mask&AttrAV != 0 {
		if err := checkAV(&a.AV); err != nil {
			return fmt.Errorf("qp: modify: %w", err)
		}
	}
	return nil
}

func checkAV(av *AddressVector) error {
	s, d := av.SrcIP.Unmap(), av.DstIP.Unmap()
	if !s.IsValid() || !d.IsValid() {
		return errors.New("address vector: source and destination IP are required")
	}
	if s.Is4() != d.Is4() {
		return errors.New("address vector: source and destination IP of different families")
	}
	if av.FlowLabel > 0xFFFFF {
		return errors.New("address vector: flow label above 20 bits")
	}
	return nil
}

// Modify changes the state and attributes selected by mask, with ibverbs'
// rules: the transition must be allowed from the current state, every
// attribute it requires must be in mask, and no attribute it does not allow.
// Without AttrState the QP stays in its state and only attributes change.
// Moving to Error flushes every outstanding work request (WCWRFlushErr);
// moving to Reset discards them without completions.
func (q *QP) Modify(a *Attr, mask AttrMask) error {
	if a == nil {
		return errors.New("qp: modify: nil attributes")
	}
	if mask&^(1<<len(attrNames)-1) != 0 {
		return fmt.Errorf("qp: modify: unknown mask bits %v", mask)
	}
	q.mu.Lock()
	err := q.modifyLocked(a, mask)
	q.mu.Unlock()
	if err == nil {
		q.ring()
	}
	return err
}

func (q *QP) modifyLocked(a *Attr, mask AttrMask) error {
	if q.destroyed {
		return wrap(ErrDestroyed, "qp: modify")
	}
	cur, next := q.state, q.state
	if mask&AttrState != 0 {
		next = a.State
		if next < Reset || next > Error {
			return fmt.Errorf("qp: modify: invalid state %v", next)
		}
	}
	tr, ok := transitionFor(q.typ, cur, next)
	if !ok {
		return wrap(ErrState, fmt.Sprintf("qp: modify %v: %v -> %v not allowed", q.typ, cur, next))
	}
	given := mask &^ AttrState
	if missing := tr.req &^ given; missing != 0 {
		return fmt.Errorf("qp: modify %v: %v -> %v requires %v", q.typ, cur, next, missing)
	}
	if extra := given &^ (tr.req | tr.opt); extra != 0 {
		return fmt.Errorf("qp: modify %v: %v -> %v does not take %v", q.typ, cur, next, extra)
	}
	if err := checkAttr(a, given); err != nil {
		return err
	}
	applyAttr(&q.attr, a, given)
	q.state = next
	q.attr.State = next
	switch next {
	case Reset:
		q.attr = Attr{State: Reset}
		q.ctl.reset = true
		q.ctl.toError = false
		q.ctl.sqMark, q.ctl.rqMark = q.sqPost, q.rqPost
	case Error:
		q.ctl.toError = true
	}
	q.ctlGen.Add(1)
	return nil
}

func applyAttr(dst, a *Attr, m AttrMask) {
	if m&AttrAccessFlags != 0 {
		dst.Access = a.Access
	}
	if m&AttrQKey != 0 {
		dst.QKey = a.QKey
	}
	if m&AttrAV != 0 {
		dst.AV = a.AV
	}
	if m&AttrPathMTU != 0 {
		dst.PathMTU = a.PathMTU
	}
	if m&AttrTimeout != 0 {
		dst.Timeout = a.Timeout
	}
	if m&AttrRetryCnt != 0 {
		dst.RetryCnt = a.RetryCnt
	}
	if m&AttrRNRRetry != 0 {
		dst.RNRRetry = a.RNRRetry
	}
	if m&AttrRQPSN != 0 {
		dst.RQPSN = a.RQPSN
	}
	if m&AttrMaxRdAtomic != 0 {
		dst.MaxRdAtomic = a.MaxRdAtomic
	}
	if m&AttrMinRNRTimer != 0 {
		dst.MinRNRTimer = a.MinRNRTimer
	}
	if m&AttrSQPSN != 0 {
		dst.SQPSN = a.SQPSN
	}
	if m&AttrMaxDestRdAtomic != 0 {
		dst.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if m&AttrDestQPN != 0 {
		dst.DestQPN = a.DestQPN
	}
	if m&AttrSelectiveRepeat != 0 {
		dst.SelectiveRepeat = a.SelectiveRepeat
		dst.SRWindow = a.SRWindow
	}
	if m&AttrDCQCN != 0 {
		dst.DCQCN = a.DCQCN
	}
	if m&AttrSendWindow != 0 {
		dst.SendWindow = a.SendWindow
	}
}

// PostSend queues a send work request; the QP copies it (and, with Inline,
// its payload). It fails with ErrState unless the QP is in RTS (or Error,
// where the request completes at once with WCWRFlushErr), with ErrQueueFull
// when MaxSendWR requests are outstanding, and with a descriptive error for
// a malformed request. Errors found later (bad lkey, remote errors) come as
// work completions.
func (q *QP) PostSend(wr *SendWR) error {
	if wr == nil {
		return errors.New("qp: post send: nil work request")
	}
	if err := q.checkSend(wr); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.postSendLocked(wr); err != nil {
		q.mu.Unlock()
		return err
	}
	q.mu.Unlock()
	q.ring()
	return nil
}

func (q *QP) checkSend(wr *SendWR) error {
	if wr.Opcode.isLocal() {
		return q.checkLocalSend(wr) // mw.go
	}
	switch q.typ {
	case UD:
		if wr.Opcode != WRSend && wr.Opcode != WRSendImm {
			return fmt.Errorf("qp: post send: %v on a UD queue pair", wr.Opcode)
		}
		if wr.AH == nil {
			return errors.New("qp: post send: UD work request without address handle")
		}
		if err := checkAV(wr.AH); err != nil {
			return fmt.Errorf("qp: post send: %w", err)
		}
		if wr.RemoteQPN == 0 || wr.RemoteQPN > wire.PSNMask {
			return fmt.Errorf("qp: post send: remote QPN %#x out of range", wr.RemoteQPN)
		}
	case UC:
		if wr.Opcode != WRSend && wr.Opcode != WRSendImm && wr.Opcode != WRRDMAWrite && wr.Opcode != WRRDMAWriteImm {
			return fmt.Errorf("qp: post send: %v on a UC queue pair", wr.Opcode)
		}
	case OOO:
		if err := q.checkOOOSend(wr); err != nil {
			return err
		}
	default:
		if wr.Opcode < WRRDMAWrite || wr.Opcode > WRSendInv {
			return fmt.Errorf("qp: post send: invalid opcode %v", wr.Opcode)
		}
	}
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("qp: post send: %d SGEs, max %d", len(wr.SGL), q.maxSGE)
	}
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Length)
	}
	if n > MaxMessage {
		return fmt.Errorf("qp: post send: message of %d bytes exceeds 2^31", n)
	}
	if wr.Opcode.isAtomic() {
		if n != 8 {
			return fmt.Errorf("qp: post send: atomic needs 8 bytes of local memory, SGL has %d", n)
		}
		if wr.RemoteAddr%8 != 0 {
			return fmt.Errorf("qp: post send: atomic remote address %#x not 8-byte aligned", wr.RemoteAddr)
		}
	}
	if wr.Flags&Inline != 0 {
		if wr.Opcode.isReadOrAtomic() {
			return fmt.Errorf("qp: post send: inline %v", wr.Opcode)
		}
		if n > uint64(q.maxInline) {
			return fmt.Errorf("qp: post send: %d inline bytes, max %d", n, q.maxInline)
		}
	}
	return nil
}

func (q *QP) postSendLocked(wr *SendWR) error {
	if q.destroyed {
		return wrap(ErrDestroyed, "qp: post send")
	}
	if q.state != RTS && q.state != Error {
		return wrap(ErrState, fmt.Sprintf("qp: post send in %v", q.state))
	}
	if q.typ == UD {
		mtu := q.attr.PathMTU
		if !mtu.Valid() {
			mtu = defaultUDMTU
		}
		var n uint64
		for _, s := range wr.SGL {
			n += uint64(s.Length)
		}
		if n > uint64(mtu.Bytes()) {
			return fmt.Errorf("qp: post send: UD message of %d bytes exceeds the path MTU %d", n, mtu.Bytes())
		}
	}
	if q.typ == RC && wr.Opcode.isReadOrAtomic() && q.attr.MaxRdAtomic == 0 && q.state == RTS {
		return fmt.Errorf("qp: post send: %v with max_rd_atomic 0", wr.Opcode)
	}
	if q.sqPost-q.sqDone.Load() >= uint32(q.maxSendWR) {
		return wrap(ErrQueueFull, fmt.Sprintf("qp: post send: %d outstanding", q.maxSendWR))
	}
	w := q.sendSlot()
	if err := w.fill(q, wr); err != nil {
		return err
	}
	q.sqPost++
	q.sqPosted.Store(q.sqPost)
	return nil
}

// PostRecv queues a receive work request; the QP copies it. It fails with
// ErrState in RESET and ErrQueueFull when MaxRecvWR requests are outstanding.
func (q *QP) PostRecv(wr *RecvWR) error {
	if wr == nil {
		return errors.New("qp: post recv: nil work request")
	}
	if q.srqRecv.srq != nil {
		return errors.New("qp: post recv: the queue pair receives on a shared receive queue (post to it)")
	}
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("qp: post recv: %d SGEs, max %d", len(wr.SGL), q.maxSGE)
	}
	q.mu.Lock()
	switch {
	case q.destroyed:
		q.mu.Unlock()
		return wrap(ErrDestroyed, "qp: post recv")
	case q.state == Reset:
		q.mu.Unlock()
		return wrap(ErrState, fmt.Sprintf("qp: post recv in %v", q.state))
	case q.rqPost-q.rqDone.Load() >= uint32(q.maxRecvWR):
		q.mu.Unlock()
		return wrap(ErrQueueFull, fmt.Sprintf("qp: post recv: %d outstanding", q.maxRecvWR))
	}
	w := q.recvSlot()
	if len(wr.SGL) > len(w.sglBuf) {
		// A slot gets its SGE buffer with its first non-empty SGL, so a
		// queue pair that posts only zero-length receives carries none.
		w.sglBuf = make([]mr.SGE, q.maxSGE)
	}
	w.set(wr.ID, wr.SGL)
	q.rqPost++
	q.rqPosted.Store(q.rqPost)
	q.mu.Unlock()
	q.ring()
	return nil
}
