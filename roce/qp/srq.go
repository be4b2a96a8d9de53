package qp

import (
	"errors"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/roce/mr"
)

// Limits of SRQConfig.
const (
	MaxSRQ = 1 << 16 // shared receive queues per device (the device's count)
)

// ErrSRQBusy: the shared receive queue still has queue pairs attached (ibverbs'
// EBUSY from ibv_destroy_srq).
var ErrSRQBusy = errors.New("qp: shared receive queue in use")

// SRQConfig describes a shared receive queue for NewSRQ.
type SRQConfig struct {
	PD     *mr.PD
	MaxWR  int // outstanding receive WRs (0: DefaultMaxWR; at most MaxWR)
	MaxSGE int // SGEs per WR (0: DefaultMaxSGE; at most MaxSGELimit)
	// Limit arms the SRQ-limit event at once (0: not armed), as srq_limit
	// of ibv_create_srq.
	Limit int
}

// An SRQ is a shared receive queue (IBA 10.2.9): the receive work requests
// of every queue pair created on it. Posting may happen from any goroutine;
// the engines of the attached queue pairs take WQEs under its lock (a SEND's
// first packet takes one, which then belongs to that queue pair until the
// message completes).
type SRQ struct {
	pd     *mr.PD
	maxWR  int
	maxSGE int

	mu        sync.Mutex
	ring      []recvWQE
	mask      uint32
	head      uint32 // next WQE to take (free-running)
	tail      uint32 // next slot to post
	limit     int    // armed limit (0: not armed)
	users     int    // queue pairs attached
	destroyed bool
	onLimit   func() // called (without the lock) when the limit fires
}

// NewSRQ creates a shared receive queue; it holds cfg.PD until destroyed.
func NewSRQ(cfg SRQConfig) (*SRQ, error) {
	if cfg.PD == nil {
		return nil, errors.New("qp: new srq: no protection domain")
	}
	if cfg.MaxWR == 0 {
		cfg.MaxWR = DefaultMaxWR
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = DefaultMaxSGE
	}
	switch {
	case cfg.MaxWR < 0 || cfg.MaxWR > MaxWR:
		return nil, fmt.Errorf("qp: new srq: max_wr %d out of range 1..%d", cfg.MaxWR, MaxWR)
	case cfg.MaxSGE < 0 || cfg.MaxSGE > MaxSGELimit:
		return nil, fmt.Errorf("qp: new srq: max_sge %d out of range 1..%d", cfg.MaxSGE, MaxSGELimit)
	case cfg.Limit < 0 || cfg.Limit > cfg.MaxWR:
		return nil, fmt.Errorf("qp: new srq: srq_limit %d out of range 0..%d", cfg.Limit, cfg.MaxWR)
	}
	if err := cfg.PD.Hold(); err != nil {
		return nil, fmt.Errorf("qp: new srq: %w", err)
	}
	n := ringSize(cfg.MaxWR)
	s := &SRQ{pd: cfg.PD, maxWR: cfg.MaxWR, maxSGE: cfg.MaxSGE, ring: make([]recvWQE, n), mask: uint32(n - 1), limit: cfg.Limit}
	sges := make([]mr.SGE, n*cfg.MaxSGE)
	for i := range s.ring {
		s.ring[i].sglBuf = sges[i*cfg.MaxSGE : (i+1)*cfg.MaxSGE : (i+1)*cfg.MaxSGE]
	}
	return s, nil
}

// MaxWR and MaxSGE are the queue's capacities.
func (s *SRQ) MaxWR() int  { return s.maxWR }
func (s *SRQ) MaxSGE() int { return s.maxSGE }

// SetLimitHandler sets the function called when the armed limit fires (the
// device raises the SRQ-limit asynchronous event). It is called from the
// engine of the queue pair that took the WQE; it must not block.
func (s *SRQ) SetLimitHandler(f func()) {
	s.mu.Lock()
	s.onLimit = f
	s.mu.Unlock()
}

// PostRecv queues a receive work request; the SRQ copies it. It fails with
// ErrQueueFull when MaxWR requests are outstanding.
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if wr == nil {
		return errors.New("qp: srq post recv: nil work request")
	}
	if len(wr.SGL) > s.maxSGE {
		return fmt.Errorf("qp: srq post recv: %d SGEs, max %d", len(wr.SGL), s.maxSGE)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.destroyed:
		return wrap(ErrDestroyed, "qp: srq post recv")
	case int(s.tail-s.head) >= s.maxWR:
		return wrap(ErrQueueFull, fmt.Sprintf("qp: srq post recv: %d outstanding", s.maxWR))
	}
	s.ring[s.tail&s.mask].set(wr.ID, wr.SGL)
	s.tail++
	return nil
}

// Limit returns the armed limit (0: not armed), as ibv_query_srq's
// srq_limit.
func (s *SRQ) Limit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// Outstanding returns the WQEs posted and not yet taken by a queue pair.
func (s *SRQ) Outstanding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.tail - s.head)
}

// ModifyLimit arms the limit (ibv_modify_srq with IBV_SRQ_LIMIT): when a
// queue pair takes a WQE and fewer than limit remain, the limit handler runs
// once and the limit is disarmed (0). limit 0 disarms it.
func (s *SRQ) ModifyLimit(limit int) error {
	if limit < 0 || limit > s.maxWR {
		return fmt.Errorf("qp: modify srq: srq_limit %d out of range 0..%d", limit, s.maxWR)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wrap(ErrDestroyed, "qp: modify srq")
	}
	s.limit = limit
	return nil
}

// Destroy releases the SRQ's hold on its PD. It fails with ErrSRQBusy while
// queue pairs are attached; later posts fail with ErrDestroyed.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	switch {
	case s.destroyed:
		s.mu.Unlock()
		return wrap(ErrDestroyed, "qp: destroy srq")
	case s.users > 0:
		n := s.users
		s.mu.Unlock()
		return fmt.Errorf("qp: destroy srq: %d queue pairs attached: %w", n, ErrSRQBusy)
	}
	s.destroyed = true
	s.mu.Unlock()
	s.pd.Release()
	return nil
}

// attach counts a queue pair created on the SRQ.
func (s *SRQ) attach(pd *mr.PD) error {
	if pd != s.pd {
		return errors.New("the shared receive queue belongs to another protection domain")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wrap(ErrDestroyed, "shared receive queue")
	}
	s.users++
	return nil
}

func (s *SRQ) detach() {
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}

// take moves the oldest WQE into dst (whose sglBuf has room for maxSGE
// SGEs); false when the queue is empty. It allocates nothing.
func (s *SRQ) take(dst *recvWQE) bool {
	s.mu.Lock()
	if s.head == s.tail {
		s.mu.Unlock()
		return false
	}
	r := &s.ring[s.head&s.mask]
	dst.set(r.id, r.sgl())
	s.head++
	var fire func()
	if s.limit > 0 && int(s.tail-s.head) < s.limit {
		s.limit = 0
		fire = s.onLimit
	}
	s.mu.Unlock()
	if fire != nil {
		fire()
	}
	return true
}

// srqRecv is the receive side of a queue pair on an SRQ: the WQE it took for
// the message in progress. Owned by the progress goroutine.
type srqRecv struct {
	srq  *SRQ
	cur  recvWQE
	held bool
	// lastWQE counts the times the queue pair entered Error and released
	// its SRQ WQE (IBA 11.6.3, last WQE reached).
	lastWQE uint32
}

// recvEmpty reports whether no receive WQE is available for a new message;
// on an SRQ it takes one (which the QP then holds) when it has none.
func (q *QP) recvEmpty() bool {
	if s := &q.srqRecv; s.srq != nil {
		if !s.held {
			s.held = s.srq.take(&s.cur)
		}
		return !s.held
	}
	return q.resp.rqHead == q.rqPosted.Load()
}

// recvInUse reports whether a receive WQE is at the head (RQ) or held (SRQ).
func (q *QP) recvInUse() bool {
	if q.srqRecv.srq != nil {
		return q.srqRecv.held
	}
	return q.resp.rqHead != q.rqPosted.Load()
}

// recvHead returns the receive WQE the current message lands in; recvEmpty
// must have returned false for it.
func (q *QP) recvHead() *recvWQE {
	if q.srqRecv.srq != nil {
		return &q.srqRecv.cur
	}
	return q.recvAt(q.resp.rqHead)
}

// flushSRQRecv completes the WQE the queue pair holds with a flush error and
// counts the last-WQE-reached event once per entry into Error (the SRQ's
// other WQEs stay for the other queue pairs).
func (q *QP) flushSRQRecv() {
	s := &q.srqRecv
	if s.held {
		wc := WC{ID: s.cur.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}
		s.held = false
		q.rcq.push(&wc)
	}
	if !q.resp.lastWQE {
		q.resp.lastWQE = true
		s.lastWQE++
	}
}

// LastWQEReached counts the times the queue pair, attached to an SRQ,
// entered Error and will take no more of its WQEs. Only the progress
// goroutine may call it; the device raises the last-WQE-reached event when
// it grows.
func (q *QP) LastWQEReached() uint32 { return q.srqRecv.lastWQE }

// SRQ returns the shared receive queue the queue pair receives on (nil: its
// own receive queue).
func (q *QP) SRQ() *SRQ { return q.srqRecv.srq }
