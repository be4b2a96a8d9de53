package xfer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/xdproce/xdproce/enlarge"
	"github.com/xdproce/xdproce/roce"
)

// Transfers through an enlargement channel (Options.Enlarge; requests
// "put_enlarge", enlarge_put.go, and "get_enlarge", enlarge_get.go, which
// share enlarge_stream.go). The client's queue pair goes to INIT and its
// channel end is created before the request, so the request carries the
// channel's configuration and the client's Endpoint (receive ring and
// mailbox) with the queue pair; the server builds its end with the same configuration, connects
// and answers with its queue pair and Endpoint. The content then goes as
// channel messages in order: a first message just over the phase-0 threshold
// of each step of the ladder (so the sending direction promotes step by step:
// ENLARGE_REQ, ENLARGE_ACK, data), then messages of EnlargeMessageSteps top
// steps, which the channel sends in pieces of the top step. The end message
// with the SHA-256 and the verdict go over the control connection as for the
// plain path. For get_enlarge the server is the sending side and the accept
// also carries the file's size. A server of an older version answers
// "unknown request".

const msgPutEnlarge = "put_enlarge"

// EnlargeMessageSteps is the size of the messages the content is cut into
// once the channel is at its top step, in top steps (8 × 128 KiB by
// default).
const EnlargeMessageSteps = 8

// DefaultEnlargeConfig is the channel configuration `xdproce send --enlarge`
// uses: enlarge's defaults (4 × 512 B ring growing to 16 on demand, ladder
// 512 B → 8 KiB → 128 KiB)
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
	GrowSlots   int    `json:"grow_slots,omitempty"` // absent (a peer from before ring growth): the ring does not grow
	LargeSlots  int    `json:"large_slots"`
	Threshold   int    `json:"threshold"`
	RingAddr    uint64 `json:"ring_addr"`
	RingRKey    uint32 `json:"ring_rkey"`
	MailboxAddr uint64 `json:"mailbox_addr"`
	MailboxRKey uint32 `json:"mailbox_rkey"`
}

func (ci *channelInfo) config() (*enlarge.Config, error) {
	c := &enlarge.Config{Ladder: ci.Ladder, RingSlots: ci.RingSlots, GrowSlots: cmp.Or(ci.GrowSlots, -1),
		LargeSlots: ci.LargeSlots, Threshold: ci.Threshold}
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
	q, err := newBareQP(dev, roce.RC, cqDepth, send, recv, local)
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
	// The eager pool: one slot of the first step per ring slot (of the
	// grown ring when it grows).
	slots, slotSize := cfg.EagerSlots(), 0
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
	return &channelInfo{Mode: cfg.Mode.String(), Ladder: cfg.Ladder, RingSlots: cfg.RingSlots, GrowSlots: cfg.GrowSlots,
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
	ring := max(cfg.RingBytes(0), cfg.GrownRingBytes())
	n := enlarge.MailboxLen + 2*ring // ring and pool
	for p := 1; p < len(cfg.Ladder); p++ {
		n = max(n, enlarge.MailboxLen+ring+2*cfg.RingBytes(p))
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

// channelConfig is the configuration of the channel a request asks for,
// refused when it is missing, invalid, or its buffers would exceed this
// server's staging limit (Options.SlotSize × Options.Slots).
func (s *Server) channelConfig(c *ctrl, req *message) (*enlarge.Config, error) {
	if req.Channel == nil {
		return nil, refuse(c, errors.New("enlargement channel: no channel in the request"))
	}
	cfg, err := req.Channel.config()
	if err != nil {
		return nil, refuse(c, err)
	}
	o := s.Options.withDefaults()
	if need, limit := channelBytes(cfg), o.SlotSize*o.Slots; need > limit {
		return nil, refuse(c, fmt.Errorf("enlargement channel: its buffers would take %d bytes, over this server's limit of %d", need, limit))
	}
	return cfg, nil
}

// acceptChannel builds the server's end of the channel a request asks for,
// connects it to the client's and sends acc with the server's queue pair and
// Endpoint; res gets the path MTU.
func (s *Server) acceptChannel(c *ctrl, req *message, cfg *enlarge.Config, acc *message, res *Result) (*chanConn, error) {
	co := s.Options.withDefaults().Connect
	cc, err := newChanConn(s.Dev, cfg, co, c.c.LocalAddr())
	if err != nil {
		return nil, refuse(c, err)
	}
	if err := cc.connect(req, co); err != nil {
		cc.close()
		return nil, refuse(c, err)
	}
	if err := cc.ch.Connect(req.Channel.endpoint()); err != nil {
		cc.close()
		return nil, refuse(c, fmt.Errorf("enlargement channel: %w", err))
	}
	acc.Channel = cc.info()
	cc.endpoint(acc)
	res.PathMTU = min(acc.PathMTU, req.PathMTU)
	if err := c.send(acc); err != nil {
		cc.close()
		return nil, err
	}
	return cc, nil
}

// openChannel is the client's side of a request for a channel: it builds its
// end (configuration o.Enlarge), sends req with it and the queue pair, and
// connects both to the server's as its accept says.
func openChannel(ctx context.Context, c *ctrl, dev *roce.Device, o *Options, req *message) (*chanConn, *message, error) {
	cc, err := newChanConn(dev, o.Enlarge, o.Connect, c.c.LocalAddr())
	if err != nil {
		return nil, nil, err
	}
	req.Channel = cc.info()
	cc.endpoint(req)
	acc := &message{}
	if err = c.send(req); err == nil {
		if err = c.expect(acc, msgAccept); err != nil {
			err = ctxErr(ctx, err)
		}
	}
	if err == nil && acc.Channel == nil {
		err = errors.New("server accepted without an enlargement channel")
	}
	if err == nil {
		err = cc.connect(acc, o.Connect)
	}
	if err == nil {
		if err = cc.ch.Connect(acc.Channel.endpoint()); err != nil {
			err = fmt.Errorf("enlargement channel: %w", err)
		}
	}
	if err != nil {
		cc.close()
		return nil, nil, err
	}
	return cc, acc, nil
}
