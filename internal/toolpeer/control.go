package toolpeer

import (
	"context"
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/roce"
)

// Control is the control channel of perftest's rdma_cm mode (-R): an RC queue pair the RDMA
// CM connects, on which each message of perftest's exchange is one SEND (cm.PerftestMessages).
// Its receives are posted before the connection exists (the queue pair waits in INIT, where
// rdma_create_qp leaves one), so the peer's first SEND finds one, and each is posted again as
// soon as its message was read. perftest keeps one posted; this side keeps controlRecvs.
type Control struct {
	QP       *roce.QP // RC, in INIT with receives posted until the CM connects it
	scq, rcq *roce.CQ
	mr       *roce.MR
	buf      []byte
}

const (
	controlSlot  = 64 // bytes per message slot: perftest's messages are at most 56
	controlRecvs = 4
	controlSend  = controlRecvs // the slot SENDs go from
)

// NewControl makes the control queue pair of pd's device, its CQs and message buffers.
func NewControl(dev *roce.Device, pd *roce.PD) (*Control, error) {
	c := &Control{buf: make([]byte, (controlRecvs+1)*controlSlot)}
	var err error
	if c.scq, err = dev.CreateCQ(4); err != nil {
		return nil, err
	}
	if c.rcq, err = dev.CreateCQ(controlRecvs); err != nil {
		return nil, err
	}
	if c.mr, err = pd.RegMR(c.buf, roce.LocalWrite); err != nil {
		return nil, err
	}
	if c.QP, err = pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: c.scq, RecvCQ: c.rcq, MaxSendWR: 4, MaxRecvWR: controlRecvs, MaxSGE: 1}); err != nil {
		return nil, err
	}
	if err := c.QP.Modify(&roce.Attr{State: roce.StateInit, Access: roce.LocalWrite}, roce.AttrState|roce.AttrAccessFlags); err != nil {
		c.QP.Destroy()
		return nil, err
	}
	for i := range controlRecvs {
		if err := c.postRecv(i); err != nil {
			c.QP.Destroy()
			return nil, err
		}
	}
	return c, nil
}

func (c *Control) sge(slot, n int) []roce.SGE {
	return []roce.SGE{{Addr: c.mr.Addr() + uint64(slot*controlSlot), Length: uint32(n), LKey: c.mr.LKey()}}
}

func (c *Control) postRecv(slot int) error {
	return c.QP.PostRecv(roce.RecvWR{ID: uint64(slot), SGL: c.sge(slot, controlSlot)})
}

// ErrControlClosed is what a read or write on the control channel returns once the queue pair
// flushed its work (the peer disconnected, or this side did).
var ErrControlClosed = errors.New("the control connection is closed")

// SendMsg sends b as one SEND and waits for its completion.
func (c *Control) SendMsg(ctx context.Context, b []byte) error {
	if len(b) > controlSlot {
		return fmt.Errorf("toolpeer: control message of %d bytes, at most %d", len(b), controlSlot)
	}
	copy(c.buf[controlSend*controlSlot:], b)
	if err := c.QP.PostSend(roce.SendWR{ID: controlSend, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: c.sge(controlSend, len(b))}); err != nil {
		return fmt.Errorf("toolpeer: control: post send: %w", err)
	}
	wc, err := c.wait(ctx, c.scq)
	if err != nil {
		return err
	}
	if wc.Status != roce.WCSuccess {
		return fmt.Errorf("toolpeer: control: SEND completed with %v", wc.Status)
	}
	return nil
}

// RecvMsg waits for the next message, copies it into b and posts its receive again.
func (c *Control) RecvMsg(ctx context.Context, b []byte) (int, error) {
	wc, err := c.wait(ctx, c.rcq)
	if err != nil {
		return 0, err
	}
	if wc.Status != roce.WCSuccess {
		return 0, fmt.Errorf("toolpeer: control: receive completed with %v", wc.Status)
	}
	slot, n := int(wc.ID), int(wc.ByteLen)
	if slot >= controlRecvs || n > len(b) {
		return 0, fmt.Errorf("toolpeer: control: a message of %d bytes in slot %d (room for %d)", n, slot, len(b))
	}
	copy(b, c.buf[slot*controlSlot:slot*controlSlot+n])
	return n, c.postRecv(slot)
}

func (c *Control) wait(ctx context.Context, cq *roce.CQ) (roce.WC, error) {
	var wcs [1]roce.WC
	if _, err := cq.Wait(ctx, wcs[:]); err != nil {
		return roce.WC{}, fmt.Errorf("toolpeer: control: %w", err)
	}
	if wcs[0].Status == roce.WCWRFlushErr {
		return roce.WC{}, ErrControlClosed
	}
	return wcs[0], nil
}

// Destroy destroys the queue pair (after the CM connection ended).
func (c *Control) Destroy() { c.QP.Destroy() }
