package lmrm

import (
	"context"
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/roce"
)

// Errors (wrapped: test with errors.Is).
var (
	// ErrExhausted: every slot of every live pool is reserved or in flight,
	// and no (further) allocation is allowed.
	ErrExhausted = errors.New("pool exhausted")
	// ErrPending: every slot is taken and the one extra allocation
	// (Config.Grow) is on its way; Reserve again after Progress.
	ErrPending = errors.New("pool exhausted, allocation pending")
	// ErrRevoked: the provider revoked the pool (LMRM_REVOKE, or a write
	// completed with a remote access error).
	ErrRevoked = errors.New("pool revoked")
	// ErrNoPool: no allocation was granted yet.
	ErrNoPool = errors.New("no pool granted")
	// ErrBusy: the send queue is full; call Progress.
	ErrBusy = errors.New("send queue full")
	// ErrClosed: the end was closed or failed.
	ErrClosed = errors.New("closed")
	// ErrProtocol: the peer sent something the protocol does not allow.
	ErrProtocol = errors.New("protocol violation")
)

// Work request ids: the kind in the top bits, a slot or buffer index below.
const (
	idRecv  = 1 << 60
	idSend  = 2 << 60
	idWrite = 3 << 60
	idKind  = 0xF << 60
)

// cQP and cPD are what the package uses of a roce.QP and a roce.PD (its tests
// also run it over bare roce/qp queue pairs driven by hand, for reproducible
// captures).
type cQP interface {
	PostSend(wr roce.SendWR) error
	PostRecv(wr roce.RecvWR) error
}

type cPD interface {
	RegMR(buf []byte, access roce.Access) (*roce.MR, error)
	RegMRIOVA(buf []byte, iova uint64, access roce.Access) (*roce.MR, error)
}

// ctl is the control channel both ends share: receive buffers for control
// messages (also consumed by data writes at the provider), send buffers,
// and the completion queue's polling.
type ctl struct {
	q       cQP
	pd      cPD
	cq      *roce.CQ
	iova    uint64
	rbuf    *roce.MR // nrecv receive buffers of MaxMsg
	sbuf    *roce.MR // nsend send buffers of MaxMsg
	nrecv   int
	sfree   []int
	sqUsed  int
	sqDepth int
	err     error
	wcs     [16]roce.WC
	sge     [1]roce.SGE
	msg     Msg
}

func (c *ctl) init(q cQP, pd cPD, cq *roce.CQ, iova uint64, nrecv, nsend, sqDepth int) error {
	*c = ctl{q: q, pd: pd, cq: cq, iova: iova, nrecv: nrecv, sqDepth: sqDepth}
	var err error
	if c.rbuf, err = c.register(make([]byte, nrecv*MaxMsg), roce.LocalWrite); err != nil {
		return err
	}
	if c.sbuf, err = c.register(make([]byte, nsend*MaxMsg), 0); err != nil {
		c.rbuf.Deregister()
		return err
	}
	for i := nsend - 1; i >= 0; i-- {
		c.sfree = append(c.sfree, i)
	}
	for i := range nrecv {
		if err := c.postRecv(i); err != nil {
			c.close()
			return err
		}
	}
	return nil
}

// register registers buf with access, at the next IOVA when one was given.
func (c *ctl) register(buf []byte, access roce.Access) (*roce.MR, error) {
	if c.iova == 0 {
		return c.pd.RegMR(buf, access)
	}
	a := c.iova
	c.iova += (uint64(len(buf)) + 0xFFF) &^ 0xFFF
	return c.pd.RegMRIOVA(buf, a, access)
}

func (c *ctl) postRecv(i int) error {
	c.sge[0] = roce.SGE{Addr: c.rbuf.Addr() + uint64(i*MaxMsg), Length: MaxMsg, LKey: c.rbuf.LKey()}
	return c.q.PostRecv(roce.RecvWR{ID: idRecv | uint64(i), SGL: c.sge[:]})
}

// send sends m as one SEND.
func (c *ctl) send(m *Msg) error {
	if len(c.sfree) == 0 || c.sqUsed == c.sqDepth {
		return fmt.Errorf("send %v: %w", m.Kind, ErrBusy)
	}
	i := c.sfree[len(c.sfree)-1]
	b := c.sbuf.Bytes()[i*MaxMsg : (i+1)*MaxMsg]
	n := len(Append(b[:0], m))
	c.sge[0] = roce.SGE{Addr: c.sbuf.Addr() + uint64(i*MaxMsg), Length: uint32(n), LKey: c.sbuf.LKey()}
	if err := c.q.PostSend(roce.SendWR{ID: idSend | uint64(i), Opcode: roce.WRSend, Flags: roce.Signaled, SGL: c.sge[:]}); err != nil {
		return fmt.Errorf("send %v: %w", m.Kind, err)
	}
	c.sfree = c.sfree[:len(c.sfree)-1]
	c.sqUsed++
	return nil
}

// reap polls the completion queue, freeing send buffers itself and handing
// every other completion to fn; a receive's buffer is reposted after fn.
//
// With block it first waits for a completion, and returns ctx's error,
// having handled nothing, when ctx ends first.
func (c *ctl) reap(ctx context.Context, block bool, fn func(wc *roce.WC, recv []byte) error) error {
	for {
		var n int
		var err error
		if block {
			n, err = c.cq.Wait(ctx, c.wcs[:])
			block = false
		} else {
			n, err = c.cq.Poll(c.wcs[:])
		}
		if err != nil {
			return err
		}
		for i := range n {
			wc := &c.wcs[i]
			slot := int(wc.ID &^ idKind)
			switch wc.ID & idKind {
			case idSend:
				c.sqUsed--
				c.sfree = append(c.sfree, slot)
				if wc.Status != roce.WCSuccess {
					return fmt.Errorf("control send completed with %v", wc.Status)
				}
			case idRecv:
				if wc.Status != roce.WCSuccess {
					return fmt.Errorf("receive completed with %v", wc.Status)
				}
				var b []byte
				if !wc.WithImm || wc.Opcode != roce.WCRecvRDMAWithImm {
					b = c.rbuf.Bytes()[slot*MaxMsg : slot*MaxMsg+int(min(wc.ByteLen, MaxMsg))]
				}
				if err := fn(wc, b); err != nil {
					return err
				}
				if err := c.postRecv(slot); err != nil {
					return err
				}
			default:
				c.sqUsed--
				if err := fn(wc, nil); err != nil {
					return err
				}
			}
		}
		if n < len(c.wcs) {
			return nil
		}
	}
}

func (c *ctl) close() error {
	var errs []error
	if c.rbuf != nil {
		errs = append(errs, c.rbuf.Deregister(), c.sbuf.Deregister())
		c.rbuf, c.sbuf = nil, nil
	}
	return errors.Join(errs...)
}
