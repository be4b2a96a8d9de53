package xfer

import (
	"context"
	"fmt"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// get_enlarge: the server sends a file through an enlargement channel, the
// mirror of put_enlarge. The client's request carries the channel's
// configuration and its Endpoint; the server's accept carries the file's size
// and its own Endpoint. The client then connects its queue pair and says
// ready (the server's first write must not reach a queue pair that cannot
// receive yet: it would be dropped and wait for RC's retransmission). The
// server's sending direction climbs the ladder (its
// ENLARGE_REQs answered by the client's ENLARGE_ACKs), sends the end message
// with the SHA-256, and the client answers ok once its own SHA-256 agrees,
// then renames its temporary file.

const (
	msgGetEnlarge = "get_enlarge"
	msgReady      = "ready" // client → server: its end of the channel is connected
)

// getEnlarge is Get through an enlargement channel, into tmp.
func getEnlarge(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, dev *roce.Device, name string, tmp *tempFile, o *Options) (res Result, err error) {
	cc, acc, err := openChannel(ctx, c, dev, o, &message{Type: msgGetEnlarge, Version: ProtocolVersion, Name: name})
	if err != nil {
		return res, err
	}
	defer cc.close()
	if acc.Size < 0 {
		return res, fmt.Errorf("server offered a file of %d bytes", acc.Size)
	}
	if err := c.send(&message{Type: msgReady}); err != nil {
		return res, ctxErr(ctx, err)
	}
	res = Result{Name: name, Size: acc.Size, Link: dev.LinkName(), Peer: acc.Link, Op: OpEnlarge,
		PathMTU: min(dev.PathMTU().Bytes(), acc.PathMTU)}
	start := time.Now()

	end := watchEnd(c, cancel)
	if res.SHA256, err = recvContent(ctx, c, cc, tmp.File, acc.Size, name, o.Progress); err != nil {
		return res, err
	}
	if err := awaitEnd(ctx, c, end, acc.Size, res.SHA256, name, "server"); err != nil {
		return res, err
	}
	if err := tmp.commit(true); err != nil {
		return res, refuse(c, err)
	}
	if err := c.send(&message{Type: msgOK, SHA256: res.SHA256}); err != nil {
		return res, ctxErr(ctx, err)
	}
	res.finish(start)
	res.Enlarge = cc.result(false)
	return res, nil
}

// serveGetEnlarge sends a file through an enlargement channel.
func (s *Server) serveGetEnlarge(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, req *message) (res Result, err error) {
	res = Result{Name: req.Name, Link: s.Dev.LinkName(), Peer: req.Link, Op: OpEnlarge}
	cfg, err := s.channelConfig(c, req)
	if err != nil {
		return res, err
	}
	f, size, err := s.openGet(c, req)
	if err != nil {
		return res, err
	}
	defer f.Close()
	res.Size = size
	cc, err := s.acceptChannel(c, req, cfg, &message{Type: msgAccept, Size: size}, &res)
	if err != nil {
		return res, err
	}
	defer cc.close()
	var m message
	if err := c.expect(&m, msgReady); err != nil {
		return res, ctxErr(ctx, err)
	}
	start := time.Now()

	final := watchVerdict(c, cancel)
	sum, err := sendContent(ctx, c, cc, f, size, req.Name, nil)
	if err != nil {
		return res, err
	}
	res.SHA256 = sum
	if err := c.send(&message{Type: msgEnd, Size: size, SHA256: sum}); err != nil {
		return res, ctxErr(ctx, err)
	}
	if err := awaitVerdict(ctx, cc, final, sum, "client"); err != nil {
		return res, err
	}
	res.finish(start)
	res.Enlarge = cc.result(true)
	return res, nil
}
