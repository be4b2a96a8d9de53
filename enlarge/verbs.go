package enlarge

import (
	"errors"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/roce"
)

// Verbs is the Transport over one roce queue pair: NewVerbs(q, pd, cq, opts)
// for a queue pair q of protection domain pd whose sends and receives both
// complete on cq. The queue pair must be RC, connected (RTS), with the queue
// sizes Config.QueueDepths gives.
type Verbs struct {
	q    verbsQP
	pd   verbsPD
	cq   *roce.CQ
	iova *IOVASpace
	// sge is the SGL of the work request being posted: the queue pair may
	// keep a reference past the call, so it lives here, not on the stack.
	// Work requests and completions are built on the stack (an idle
	// connection's Verbs is 64 B).
	sge [1]roce.SGE
}

// VerbsOptions configure NewVerbs. nil means the defaults.
type VerbsOptions struct {
	// IOVA, when set, gives every registered buffer its address (for
	// reproducible captures); otherwise the address is that of the buffer.
	IOVA *IOVASpace
}

// NewVerbs returns a Transport over q, pd and cq.
func NewVerbs(q *roce.QP, pd *roce.PD, cq *roce.CQ, opts *VerbsOptions) *Verbs {
	return newVerbs(q, pd, cq, opts)
}

// verbsQP and verbsPD are what Verbs uses of a roce.QP and a roce.PD (the
// package's tests also run Verbs over bare roce/qp queue pairs driven by a
// hand-set clock).
type verbsQP interface {
	PostSend(wr roce.SendWR) error
	PostRecv(wr roce.RecvWR) error
}

type verbsPD interface {
	RegMR(buf []byte, access roce.Access) (*roce.MR, error)
	RegMRIOVA(buf []byte, iova uint64, access roce.Access) (*roce.MR, error)
}

func newVerbs(q verbsQP, pd verbsPD, cq *roce.CQ, opts *VerbsOptions) *Verbs {
	v := &Verbs{q: q, pd: pd, cq: cq}
	if opts != nil {
		v.iova = opts.IOVA
	}
	return v
}

// IOVASpace hands out I/O virtual addresses from a base upwards, each buffer
// starting on a 4 KiB boundary. Safe for concurrent use.
type IOVASpace struct {
	mu   sync.Mutex
	next uint64
}

// NewIOVASpace returns a space starting at base.
func NewIOVASpace(base uint64) *IOVASpace { return &IOVASpace{next: base} }

func (s *IOVASpace) take(n int) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.next
	s.next += (uint64(n) + 0xFFF) &^ 0xFFF
	return a
}

const verbsAccess = roce.LocalWrite | roce.RemoteWrite

// Register allocates n bytes and registers them for local and remote write.
func (v *Verbs) Register(n int) (Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("register %d B: %w", n, ErrConfig)
	}
	buf := make([]byte, n)
	var m *roce.MR
	var err error
	if v.iova != nil {
		m, err = v.pd.RegMRIOVA(buf, v.iova.take(n), verbsAccess)
	} else {
		m, err = v.pd.RegMR(buf, verbsAccess)
	}
	if err != nil {
		return nil, err // roce's error says what failed; the Channel adds its context
	}
	return m, nil
}

var errForeignRegion = errors.New("region not registered by this transport")

// Deregister invalidates r's keys and drops it.
func (v *Verbs) Deregister(r Region) error {
	m, ok := r.(*roce.MR)
	if !ok {
		return errForeignRegion
	}
	return m.Deregister()
}

// PostSend posts a signaled RDMA WRITE (with immediate data).
func (v *Verbs) PostSend(wr *WorkRequest) error {
	m, ok := wr.Local.(*roce.MR)
	if !ok {
		return errForeignRegion
	}
	op := roce.WRRDMAWrite
	if wr.Op == OpWriteImm {
		op = roce.WRRDMAWriteImm
	}
	v.sge[0] = roce.SGE{Addr: m.Addr() + uint64(wr.Offset), Length: uint32(wr.Length), LKey: m.LKey()}
	w := roce.SendWR{ID: wr.ID, Opcode: op, Flags: roce.Signaled, SGL: v.sge[:], Imm: wr.Imm,
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey}
	if wr.Length == 0 {
		w.SGL = nil
	}
	return v.q.PostSend(w)
}

// PostRecv posts a receive; r == nil posts one without buffers.
func (v *Verbs) PostRecv(id uint64, r Region, off, n int) error {
	w := roce.RecvWR{ID: id}
	if r != nil {
		m, ok := r.(*roce.MR)
		if !ok {
			return errForeignRegion
		}
		v.sge[0] = roce.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}
		w.SGL = v.sge[:]
	}
	return v.q.PostRecv(w)
}

// Poll translates the queue pair's work completions.
func (v *Verbs) Poll(c []Completion) (int, error) {
	var wcs [8]roce.WC
	n, err := v.cq.Poll(wcs[:min(len(c), len(wcs))])
	for i := 0; i < n; i++ {
		w := &wcs[i]
		c[i] = Completion{ID: w.ID, Kind: CompSend, Imm: w.ImmData, HasImm: w.WithImm}
		if w.Opcode == roce.WCRecvRDMAWithImm || w.Opcode == roce.WCRecv {
			c[i].Kind = CompRecvImm
		}
		if w.Status != roce.WCSuccess {
			c[i].Status = w.Status.String()
		}
	}
	return n, err
}

// Load copies registered memory. The Channel calls it only after polling the
// completion of the write that filled it, which orders the copy after the
// engine's (the completion queue synchronises).
func (v *Verbs) Load(r Region, off int, dst []byte) { copy(dst, r.Bytes()[off:]) }

var _ Transport = (*Verbs)(nil)
