package xfer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/xdproce/xdproce/lmrm"
	"github.com/xdproce/xdproce/roce"
)

// getLMRM is getRC on an lmrm pool (get_lmrm): the client is the provider,
// the server writes into its pool, and what arrives goes to dst in order.
// It sends ready once its queue pair is connected and its receives posted,
// so that the server's LMRM_ALLOC finds it listening.
func getLMRM(ctx context.Context, c *ctrl, dev *roce.Device, name string, sp *Span, dst contentDst, o *Options) (res Result, err error) {
	q, cfg, err := newLMRMProviderQP(dev, max(o.SlotSize*o.Slots, 4096), c.c.LocalAddr())
	if err != nil {
		return res, err
	}
	var p *lmrm.Provider
	defer q.closeThen(func() {
		if p != nil {
			p.Close()
		}
	})
	req := &message{Type: msgGetLMRM, Version: ProtocolVersion, Name: name, SlotSize: o.SlotSize, Slots: o.Slots, Span: sp}
	q.offer(o.Connect) // selective repeat if both sides want it (qpconn.go)
	acc, err := q.ask(c, req)
	if err != nil {
		return res, err
	}
	if acc.Size < 0 || acc.SlotSize <= 0 || acc.Slots <= 0 || acc.SlotSize*acc.Slots > max(o.SlotSize*o.Slots, 4096) {
		return res, fmt.Errorf("server offered %d slots of %d bytes for %d bytes (asked for %d of %d)",
			acc.Slots, acc.SlotSize, acc.Size, o.Slots, o.SlotSize)
	}
	if err := dst.begin(sp, acc); err != nil {
		return res, err
	}
	if err := q.connect(acc, o.Connect); err != nil {
		return res, err
	}
	size := acc.Size
	k := &sink{w: dst, h: sha256.New(), size: size, progress: o.Progress}
	if f, ok := dst.(*tempFile); ok {
		k.hashBehind(f.File)
		defer k.stopHash()
	}
	if p, err = lmrm.NewProvider(q.qp, q.pd, q.cq, cfg, k.deliver); err != nil {
		return res, err
	}
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: OpLMRM,
		PathMTU: min(dev.PathMTU().Bytes(), acc.PathMTU), Reliability: q.rel.String(), SRWindow: q.srWin, CC: q.cc.String()}
	if err := c.send(&message{Type: msgReady}); err != nil {
		return res, err
	}
	start := time.Now()
	m, err := lmrmReceive(ctx, c, p, k)
	if err != nil {
		return res, ctxErr(ctx, err)
	}
	if err := k.hashed(); err != nil {
		return res, err
	}
	return res, acceptGet(c, dst, &m, k.h, k.next, size, start, &res)
}

// serveGetLMRM sends a file into the client's lmrm pool (get_lmrm): the
// server is the requester.
func (s *Server) serveGetLMRM(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, req *message) (res Result, err error) {
	o := s.Options.withDefaults()
	res = Result{Name: req.Name, Link: s.Dev.LinkName(), Peer: req.Link, Op: OpLMRM}
	f, size, err := s.openGet(c, req)
	if err != nil {
		return res, err
	}
	defer f.Close()
	res.Size = size
	slotSize, slots := s.limits(req)
	slotSize, slots = stagingSize(size, slotSize, slots)
	q, cfg, err := newLMRMRequesterQP(s.Dev, slots, c.c.LocalAddr())
	if err != nil {
		return res, refuse(c, err)
	}
	var lr *lmrm.Requester
	defer q.closeThen(func() {
		if lr != nil {
			lr.Close()
		}
	})
	if err := q.connect(req, o.Connect); err != nil {
		return res, refuse(c, err)
	}
	res.Reliability, res.SRWindow, res.CC = q.rel.String(), q.srWin, q.cc.String()
	if lr, err = lmrm.NewRequester(q.qp, q.pd, q.cq, cfg); err != nil {
		return res, refuse(c, err)
	}
	acc := &message{Type: msgAccept, Size: size, SlotSize: slotSize, Slots: slots, Span: req.Span}
	q.endpoint(acc)
	res.PathMTU = min(acc.PathMTU, req.PathMTU)
	if err := c.send(acc); err != nil {
		return res, err
	}
	var m message
	if err := c.expect(&m, msgReady); err != nil {
		return res, err
	}
	start := time.Now()
	// The client's verdict (or its error, which ends the writes at once).
	_, final := watchFree(c, cancel, 0)
	h := sha256.New()
	if err := lmrmWrite(ctx, lr, slotSize, slots, f, size, h, nil); err != nil {
		var re *readError
		if errors.As(err, &re) {
			return res, refuse(c, fmt.Errorf("read %q %w", req.Name, err))
		}
		if cause := context.Cause(ctx); cause != nil {
			return res, fmt.Errorf("send %s after %d writes: %w", req.Name, lr.Stats().Writes, cause)
		}
		return res, refuse(c, fmt.Errorf("write into the client's pool: %w", err))
	}
	drain := func() error { return lmrmDrain(ctx, c, lr) }
	return res, endGet(ctx, c, req.Name, size, h, drain, final, start, &res)
}
