package xfer

import (
	"context"
	"io"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// put_enlarge: the client sends a file through an enlargement channel.

// sendEnlarge is Send through an enlargement channel.
func sendEnlarge(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, dev *roce.Device, r io.Reader, size int64, name string, o *Options) (res Result, err error) {
	cc, acc, err := openChannel(ctx, c, dev, o,
		&message{Type: msgPutEnlarge, Version: ProtocolVersion, Name: name, Size: size, Force: o.Force})
	if err != nil {
		return res, err
	}
	defer cc.close()
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: OpEnlarge,
		PathMTU: min(dev.PathMTU().Bytes(), acc.PathMTU)}
	start := time.Now()

	final := watchVerdict(c, cancel)
	sum, err := sendContent(ctx, c, cc, r, size, name, o.Progress)
	if err != nil {
		return res, err
	}
	res.SHA256 = sum
	if ctx.Err() != nil {
		return res, ctxErr(ctx, nil)
	}
	if err := c.send(&message{Type: msgEnd, Size: size, SHA256: res.SHA256}); err != nil {
		return res, ctxErr(ctx, err)
	}
	if err := awaitVerdict(ctx, cc, final, res.SHA256, "server"); err != nil {
		return res, err
	}
	res.finish(start)
	res.Enlarge = cc.result(true)
	return res, nil
}

// servePutEnlarge receives a file through an enlargement channel.
func (s *Server) servePutEnlarge(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, req *message) (res Result, err error) {
	res = Result{Name: req.Name, Size: req.Size, Link: s.Dev.LinkName(), Peer: req.Link, Op: OpEnlarge}
	cfg, err := s.channelConfig(c, req)
	if err != nil {
		return res, err
	}
	tmp, cleanup, err := s.startReceive(c, req)
	if err != nil {
		return res, err
	}
	defer cleanup()
	cc, err := s.acceptChannel(c, req, cfg, &message{Type: msgAccept}, &res)
	if err != nil {
		return res, err
	}
	defer cc.close()
	start := time.Now()

	// The control connection brings the end message, the client's giving
	// up, or its end.
	end := watchEnd(c, cancel)
	if res.SHA256, err = recvContent(ctx, c, cc, tmp.File, req.Size, req.Name, nil); err != nil {
		return res, err
	}
	if err := awaitEnd(ctx, c, end, req.Size, res.SHA256, req.Name, "client"); err != nil {
		return res, err
	}
	if err := tmp.commit(s.overwrite(req)); err != nil {
		return res, refuse(c, err)
	}
	res.finish(start)
	res.Enlarge = cc.result(false)
	return res, c.send(&message{Type: msgOK, SHA256: res.SHA256})
}
