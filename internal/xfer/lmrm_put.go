package xfer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xdproce/xdproce/lmrm"
	"github.com/xdproce/xdproce/roce"
)

// sendLMRM is Send on an lmrm pool (put_lmrm): the client is the requester.
func sendLMRM(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, dev *roce.Device, r io.Reader, size int64, name string, o *Options) (res Result, err error) {
	slotSize, slots := stagingSize(size, o.SlotSize, o.Slots)
	q, cfg, err := newLMRMRequesterQP(dev, slots, c.c.LocalAddr())
	if err != nil {
		return res, err
	}
	var lr *lmrm.Requester
	defer q.closeThen(func() {
		if lr != nil {
			lr.Close()
		}
	})
	req := &message{Type: msgPutLMRM, Version: ProtocolVersion, Name: name, Size: size, Force: o.Force, SlotSize: slotSize, Slots: slots}
	q.offer(o.Connect) // selective repeat if both sides want it (qpconn.go)
	acc, err := q.ask(c, req)
	if err != nil {
		return res, err
	}
	if acc.SlotSize <= 0 || acc.Slots <= 0 || acc.SlotSize > slotSize || acc.Slots > slots {
		return res, fmt.Errorf("server offered %d slots of %d bytes (asked for %d of %d)", acc.Slots, acc.SlotSize, slots, slotSize)
	}
	if err := q.connect(acc, o.Connect); err != nil {
		return res, err
	}
	if lr, err = lmrm.NewRequester(q.qp, q.pd, q.cq, cfg); err != nil {
		return res, err
	}
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: OpLMRM,
		PathMTU: min(dev.PathMTU().Bytes(), acc.PathMTU), Reliability: q.rel.String(), SRWindow: q.srWin, CC: q.cc.String()}
	start := time.Now()
	// No slots go by the control connection: a free message is refused.
	_, final := watchFree(c, cancel, 0)
	h := sha256.New()
	if err := lmrmWrite(ctx, lr, acc.SlotSize, acc.Slots, r, size, h, o.Progress); err != nil {
		var re *readError
		if errors.As(err, &re) {
			return res, fmt.Errorf("read %s %w", name, err)
		}
		return res, ctxErr(ctx, fmt.Errorf("write to peer: %w", err))
	}
	drain := func() error { return lmrmDrain(ctx, c, lr) }
	if res.SHA256, err = endPut(ctx, c, r, h, size, name, drain, final); err != nil {
		return res, err
	}
	res.finish(start)
	return res, nil
}

// servePutLMRM receives a file written into this side's lmrm pool
// (put_lmrm): the server is the provider.
func (s *Server) servePutLMRM(ctx context.Context, c *ctrl, req *message) (res Result, err error) {
	o := s.Options.withDefaults()
	res = Result{Name: req.Name, Size: req.Size, Link: s.Dev.LinkName(), Peer: req.Link, Op: OpLMRM}
	tmp, cleanup, err := s.startReceive(c, req)
	if err != nil {
		return res, err
	}
	defer cleanup()
	slotSize, slots := s.limits(req)
	q, cfg, err := newLMRMProviderQP(s.Dev, slotSize*slots, c.c.LocalAddr())
	if err != nil {
		return res, refuse(c, err)
	}
	var p *lmrm.Provider
	defer q.closeThen(func() {
		if p != nil {
			p.Close()
		}
	})
	if err := q.connect(req, o.Connect); err != nil {
		return res, refuse(c, err)
	}
	res.Reliability, res.SRWindow, res.CC = q.rel.String(), q.srWin, q.cc.String()
	k := &sink{w: tmp.File, h: sha256.New(), size: req.Size}
	k.hashBehind(tmp.File)
	defer k.stopHash()
	if p, err = lmrm.NewProvider(q.qp, q.pd, q.cq, cfg, k.deliver); err != nil {
		return res, refuse(c, err)
	}
	acc := &message{Type: msgAccept, SlotSize: slotSize, Slots: slots}
	q.endpoint(acc)
	res.PathMTU = min(acc.PathMTU, req.PathMTU)
	if err := c.send(acc); err != nil {
		return res, err
	}
	start := time.Now()
	m, err := lmrmReceive(ctx, c, p, k)
	if err != nil {
		var re *RemoteError
		if errors.As(err, &re) || errors.Is(err, errPeerClosed) {
			return res, fmt.Errorf("receive %s after %d of %d bytes: %w", req.Name, k.next, req.Size, err)
		}
		return res, refuse(c, fmt.Errorf("receive %s after %d of %d bytes: %w", req.Name, k.next, req.Size, err))
	}
	if err := k.hashed(); err != nil {
		return res, refuse(c, fmt.Errorf("receive %s: %w", req.Name, err))
	}
	return res, s.verdict(c, tmp, req, &m, k.h, k.next, start, &res)
}
