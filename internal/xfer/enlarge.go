package xfer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/xdproce/xdproce/enlarge"
	"github.com/xdproce/xdproce/roce"
)

// Transfers through an enlargement channel (Options.Enlarge; request
// "put_enlarge"). The client's queue pair goes to INIT and its channel end is
// created before the request, so the request carries the channel's
// configuration and the client's Endpoint (receive ring and mailbox) with the
// queue pair; the server builds its end with the same configuration, connects
// and answers with its queue pair and Endpoint. The content then goes as
// channel messages in order: a first message just over the phase-0 threshold
// of each step of the ladder (so the sending direction promotes step by step:
// ENLARGE_REQ, ENLARGE_ACK, data), then messages of EnlargeMessageSteps top
// steps, which the channel sends in pieces of the top step. The end message
// with the SHA-256 and the verdict go over the control connection as for the
// plain path. A server of an older version answers "unknown request".

const msgPutEnlarge = "put_enlarge"

// EnlargeMessageSteps is the size of the messages the content is cut into
// once the channel is at its top step, in top steps (8 × 128 KiB by
// default).
const EnlargeMessageSteps = 8

// DefaultEnlargeConfig is the channel configuration `xdproce send --enlarge`
// uses: enlarge's defaults (16 × 512 B ring, ladder 512 B → 8 KiB → 128 KiB)
// with 4 slots per promoted buffer, so that four pieces are in flight
// instead of one (4 × 128 KiB registered at the top step).
func DefaultEnlargeConfig() *enlarge.Config { return &enlarge.Config{LargeSlots: 4} }

// channelInfo is one end of an enlargement channel on the control connection:
// the configuration (in the request; both ends use the client's) and the
// end's Endpoint.
type channelInfo struct {
	Mode        string `json:"mode"` // "enlarge" or "baseline"
	Ladder      []int  `json:"ladder"`
	RingSlots   int    `json:"ring_slots"`
	LargeSlots  int    `json:"large_slots"`
	Threshold   int    `json:"threshold"`
	RingAddr    uint64 `json:"ring_addr"`
	RingRKey    uint32 `json:"ring_rkey"`
	MailboxAddr uint64 `json:"mailbox_addr"`
	MailboxRKey uint32 `json:"mailbox_rkey"`
}

func (ci *channelInfo) config() (*enlarge.Config, error) {
	c := &enlarge.Config{Ladder: ci.Ladder, RingSlots: ci.RingSlots, LargeSlots: ci.LargeSlots, Threshold: ci.Threshold}
	switch ci.Mode {
	case enlarge.Enlarge.String():
	case enlarge.Baseline.String():
		c.Mode = enlarge.Baseline
	default:
		return nil, fmt.Errorf("enlargement channel: unknown mode %q", ci.Mode)
	}
	if len(ci.Ladder) == 0 || ci.RingSlots == 0 || ci.LargeSlots == 0 || ci.Threshold == 0 {
		return nil, errors.New("enlargement channel: configuration incomplete")
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("enlargement channel: %w", err)
	}
	return c, nil
}

func (ci *channelInfo) endpoint() enlarge.Endpoint {
	return enlarge.Endpoint{RingAddr: ci.RingAddr, RingRKey: ci.RingRKey, MailboxAddr: ci.MailboxAddr, MailboxRKey: ci.MailboxRKey}
}

// EnlargeResult is what a transfer through an enlargement channel did to it,
// as seen by this side.
type EnlargeResult struct {
	Phase       int    `json:"phase"`            // phase the data's direction reached
	SlotSize    int    `json:"slot_size"`        // its slot size
	Promotions  int    `json:"promotions"`       // promotions of that direction
	ControlSent int    `json:"control_sent"`     // ENLARGE_REQs (sender) or ENLARGE_ACKs (receiver)
	Registered  int    `json:"registered_bytes"` // bytes this end had registered at the end (ring, mailbox, buffers, pool)
	Messages    uint64 `json:"messages"`         // channel messages of content
}

// chanConn is a queue pair with one end of an enlargement channel over it.
type chanConn struct {
	*qpConn
	pool *enlarge.Pool
	ch   *enlarge.Channel
}

// newChanConn makes a queue pair in INIT (so receives can be posted) and a
// channel end over it with configuration cfg.
func newChanConn(dev *roce.Device, cfg *enlarge.Config, co *roce.ConnectOptions, local net.Addr) (*chanConn, error) {
	send, recv, cqDepth, err := cfg.QueueDepths()
	if err != nil {
		return nil, fmt.Errorf("enlargement channel: %w", err)
	}
	q, err := newBareQP(dev, cqDepth, send, recv, local)
	if err != nil {
		return nil, err
	}
	c := &chanConn{qpConn: q}
	access := roce.DefaultConnectOptions().Access
	if co != nil {
		access = co.Access
	}
	if err := q.qp.Modify(&roce.Attr{State: roce.StateInit, Access: access}, roce.AttrState|roce.AttrAccessFlags); err != nil {
		c.close()
		return nil, fmt.Errorf("enlargement channel: %w", err)
	}
	v := enlarge.NewVerbs(q.qp, q.pd, q.cq, nil)
	// The eager pool: one slot of the first step per ring slot.
	slots, slotSize := cfg.RingSlots, 0
	if len(cfg.Ladder) > 0 {
		slotSize = cfg.Ladder[0]
	}
	if cfg.Mode == enlarge.Baseline {
		slots, slotSize = cmp.Or(slots, enlarge.BaselineSlots), cmp.Or(slotSize, enlarge.BaselineSlotSize)
	} else {
		slots, slotSize = cmp.Or(slots, enlarge.DefaultRingSlots), cmp.Or(slotSize, enlarge.DefaultSmall)
	}
	if c.pool, err = enlarge.NewPool(v, slots, slotSize); err != nil {
		c.close()
		return nil, fmt.Errorf("enlargement channel: %w", err)
	}
	if c.ch, err = enlarge.New(v, c.pool, cfg); err != nil {
		c.close()
		return nil, fmt.Errorf("enlargement channel: %w", err)
	}
	return c, nil
}

// info describes this end for the peer.
func (c *chanConn) info() *channelInfo {
	cfg := c.ch.Config()
	ep := c.ch.Endpoint()
	return &channelInfo{Mode: cfg.Mode.String(), Ladder: cfg.Ladder, RingSlots: cfg.RingSlots,
		LargeSlots: cfg.LargeSlots, Threshold: cfg.Threshold,
		RingAddr: ep.RingAddr, RingRKey: ep.RingRKey, MailboxAddr: ep.MailboxAddr, MailboxRKey: ep.MailboxRKey}
}

// result reports the data's direction: the sending one when sender.
func (c *chanConn) result(sender bool) *EnlargeResult {
	s := c.ch.Stats()
	r := &EnlargeResult{Phase: s.RecvPhase, Registered: s.RegisteredBytes + c.pool.RegisteredBytes(),
		ControlSent: s.ControlSent, Messages: s.MessagesRecv}
	if sender {
		r.Phase, r.Messages = s.SendPhase, s.MessagesSent
	}
	r.SlotSize = c.ch.Config().Ladder[r.Phase]
	// Stats.Promotions counts both directions; only one carries data.
	r.Promotions = s.Promotions
	return r
}

// close destroys the queue pair (its outstanding work requests flush), then
// closes the channel and the pool, as package enlarge asks.
func (c *chanConn) close() {
	ch, pool := c.ch, c.pool
	c.closeThen(func() {
		if ch != nil {
			ch.Close()
		}
		if pool != nil {
			pool.Close()
		}
	})
}

// channelBytes is the most a channel end with configuration cfg (valid)
// registers at once: mailbox, receive buffer and send buffer of its largest
// step, and the eager pool.
func channelBytes(cfg *enlarge.Config) int {
	n := enlarge.MailboxLen + 2*cfg.RingBytes(0) // ring and pool
	for p := 1; p < len(cfg.Ladder); p++ {
		n = max(n, enlarge.MailboxLen+cfg.RingBytes(0)+2*cfg.RingBytes(p))
	}
	return n
}

// enlargeSizes returns the sizes of the content's channel messages for cfg
// (defaults filled in), through which the sending direction climbs the
// ladder one step at a time: one message at the threshold of each step below
// the top, then messages of EnlargeMessageSteps top steps.
func enlargeSizes(cfg enlarge.Config) (steps []int, rest int) {
	for p := 1; p < len(cfg.Ladder)-1; p++ {
		steps = append(steps, cfg.Ladder[p]*cfg.Threshold/100)
	}
	return steps, EnlargeMessageSteps * cfg.Ladder[len(cfg.Ladder)-1]
}

// sendEnlarge is Send through an enlargement channel.
func sendEnlarge(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, dev *roce.Device, r io.Reader, size int64, name string, o *Options) (res Result, err error) {
	cc, err := newChanConn(dev, o.Enlarge, o.Connect, c.c.LocalAddr())
	if err != nil {
		return res, err
	}
	defer cc.close()
	req := &message{Type: msgPutEnlarge, Version: ProtocolVersion, Name: name, Size: size, Force: o.Force, Channel: cc.info()}
	cc.endpoint(req)
	if err := c.send(req); err != nil {
		return res, err
	}
	var acc message
	if err := c.expect(&acc, msgAccept); err != nil {
		return res, ctxErr(ctx, err)
	}
	if acc.Channel == nil {
		return res, errors.New("server accepted without an enlargement channel")
	}
	if err := cc.connect(&acc, o.Connect); err != nil {
		return res, err
	}
	if err := cc.ch.Connect(acc.Channel.endpoint()); err != nil {
		return res, fmt.Errorf("enlargement channel: %w", err)
	}
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: OpEnlarge,
		PathMTU: min(dev.PathMTU().Bytes(), acc.PathMTU)}
	start := time.Now()

	final := make(chan message, 1)
	go func() {
		var m message
		if err := c.recv(&m); err != nil {
			cancel(err)
			return
		}
		switch m.Type {
		case msgOK, msgError:
			if m.Type == msgError {
				cancel(&RemoteError{Msg: m.Error})
			}
			final <- m
		default:
			cancel(fmt.Errorf("control connection: unexpected %q during the transfer", m.Type))
		}
	}()

	steps, rest := enlargeSizes(cc.ch.Config())
	buf := make([]byte, max(rest, 1))
	h := sha256.New()
	var off int64
	for i := 0; off < size; i++ {
		if ctx.Err() != nil {
			return res, ctxErr(ctx, nil)
		}
		n := rest
		if i < len(steps) {
			n = steps[i]
		}
		n = int(min(int64(n), size-off))
		b := buf[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			return res, fmt.Errorf("read %s at %d: %w", name, off, err)
		}
		h.Write(b)
		if _, err := cc.ch.WriteContext(ctx, b); err != nil {
			return res, ctxErr(ctx, fmt.Errorf("enlargement channel: %w", err))
		}
		off += int64(n)
		if o.Progress != nil {
			o.Progress(off, size)
		}
	}
	var extra [1]byte
	if n, _ := r.Read(extra[:]); n > 0 {
		c.send(&message{Type: msgError, Error: "the file grew while being sent"})
		return res, fmt.Errorf("read %s: the file grew while being sent", name)
	}
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	if ctx.Err() != nil {
		return res, ctxErr(ctx, nil)
	}
	if err := c.send(&message{Type: msgEnd, Size: size, SHA256: res.SHA256}); err != nil {
		return res, ctxErr(ctx, err)
	}
	// The channel does its protocol work only inside its calls: keep it
	// running (completions of the last writes) while the server finishes.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case m := <-final:
			if m.Type == msgError {
				return res, &RemoteError{Msg: m.Error}
			}
			if m.SHA256 != res.SHA256 {
				return res, fmt.Errorf("checksum mismatch: sent sha256 %s, server has %s", res.SHA256, m.SHA256)
			}
			done = true
		case <-ctx.Done():
			return res, ctxErr(ctx, nil)
		case <-tick.C:
			if err := cc.ch.Progress(); err != nil {
				return res, ctxErr(ctx, fmt.Errorf("enlargement channel: %w", err))
			}
		}
	}
	res.finish(start)
	res.Enlarge = cc.result(true)
	return res, nil
}

// servePutEnlarge receives a file through an enlargement channel.
func (s *Server) servePutEnlarge(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, req *message) (res Result, err error) {
	o := s.Options.withDefaults()
	res = Result{Name: req.Name, Size: req.Size, Link: s.Dev.LinkName(), Peer: req.Link, Op: OpEnlarge}
	if req.Channel == nil {
		return res, refuse(c, errors.New("enlargement channel: no channel in the request"))
	}
	cfg, err := req.Channel.config()
	if err != nil {
		return res, refuse(c, err)
	}
	if need, limit := channelBytes(cfg), o.SlotSize*o.Slots; need > limit {
		return res, refuse(c, fmt.Errorf("enlargement channel: its buffers would take %d bytes, over this server's limit of %d", need, limit))
	}
	tmp, cleanup, err := s.startReceive(c, req)
	if err != nil {
		return res, err
	}
	defer cleanup()
	cc, err := newChanConn(s.Dev, cfg, o.Connect, c.c.LocalAddr())
	if err != nil {
		return res, refuse(c, err)
	}
	defer cc.close()
	if err := cc.connect(req, o.Connect); err != nil {
		return res, refuse(c, err)
	}
	if err := cc.ch.Connect(req.Channel.endpoint()); err != nil {
		return res, refuse(c, fmt.Errorf("enlargement channel: %w", err))
	}
	acc := &message{Type: msgAccept, Channel: cc.info()}
	cc.endpoint(acc)
	res.PathMTU = min(acc.PathMTU, req.PathMTU)
	if err := c.send(acc); err != nil {
		return res, err
	}
	start := time.Now()

	// The control connection brings the end message, the client's giving
	// up, or its end.
	end := make(chan message, 1)
	go func() {
		for {
			var m message
			if err := c.recv(&m); err != nil {
				cancel(err)
				return
			}
			switch m.Type {
			case msgEnd:
				select {
				case end <- m:
				default:
					cancel(errors.New("control connection: second end message"))
					return
				}
			case msgError:
				cancel(&RemoteError{Msg: m.Error})
				return
			default:
				cancel(fmt.Errorf("control connection: unexpected %q during the transfer", m.Type))
				return
			}
		}
	}()

	h := sha256.New()
	buf := make([]byte, 256<<10)
	var next int64
	for next < req.Size {
		n, err := cc.ch.ReadContext(ctx, buf)
		if err != nil && !errors.Is(err, enlarge.ErrShortBuffer) {
			return res, ctxErr(ctx, fmt.Errorf("receive %s after %d of %d bytes: enlargement channel: %w", req.Name, next, req.Size, err))
		}
		if next+int64(n) > req.Size {
			return res, refuse(c, fmt.Errorf("more than the %d bytes announced", req.Size))
		}
		if err := appendSlot(tmp.File, h, buf[:n], next); err != nil {
			return res, refuse(c, err)
		}
		next += int64(n)
	}
	var m message
	select {
	case m = <-end:
	case <-ctx.Done():
		return res, fmt.Errorf("receive %s after %d of %d bytes: %w", req.Name, next, req.Size, context.Cause(ctx))
	}
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	if m.Size != req.Size {
		return res, refuse(c, fmt.Errorf("end after %d of %d bytes", m.Size, req.Size))
	}
	if m.SHA256 != res.SHA256 {
		return res, refuse(c, fmt.Errorf("checksum mismatch: received sha256 %s, client sent %s", res.SHA256, m.SHA256))
	}
	if err := tmp.commit(s.overwrite(req)); err != nil {
		return res, refuse(c, err)
	}
	res.finish(start)
	res.Enlarge = cc.result(false)
	return res, c.send(&message{Type: msgOK, SHA256: res.SHA256})
}
