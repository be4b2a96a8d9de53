package xfer

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/enlarge"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// Defaults of Options.
const (
	DefaultSlotSize = 4 << 20
	DefaultSlots    = 4
	// DefaultDialRetry is how long clients retry the control connection.
	DefaultDialRetry = 5 * time.Second
)

// Options tune a transfer. A nil *Options means the defaults.
type Options struct {
	// SlotSize is the bytes moved per RDMA operation (default
	// DefaultSlotSize); Slots the number of them in flight (default
	// DefaultSlots). The server's choice wins: these are the client's
	// request and the server's limit.
	SlotSize, Slots int
	// Connect are the queue pair attributes (nil: roce.DefaultConnectOptions).
	Connect *roce.ConnectOptions
	// Progress, when set, is called with the bytes done so far and the
	// total after each slot.
	Progress func(done, total int64)
	// Force asks the server to replace a file of the same name (Send; the
	// server must allow it too, Server.Overwrite).
	Force bool
	// Log receives diagnostics (nil: none).
	Log *slog.Logger
	// Enlarge, when set, makes Send and Get move the file through an
	// enlargement channel (package enlarge) with this configuration instead
	// of RDMA WRITEs into (READs from) the server's staging buffer; SlotSize
	// and Slots are then not used. &enlarge.Config{} means enlarge's
	// defaults; DefaultEnlargeConfig is what `xdproce send --enlarge` and
	// `xdproce get --enlarge` use. Servers accept every kind of transfer
	// whatever their Options.
	Enlarge *enlarge.Config
	// OOO, when set, makes Send and Get move the file in OOO mode (ooo.go):
	// the client's OOO queue pair writes into (reads from) the server's
	// staging buffer through package roce/ooo's Writer with this
	// configuration (Paths: UDP source ports per operation). The server
	// must announce cm.CapOOO. Not with Enlarge.
	OOO *ooo.Config
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.SlotSize <= 0 {
		r.SlotSize = DefaultSlotSize
	}
	if r.Slots <= 0 {
		r.Slots = DefaultSlots
	}
	if r.Slots > 64 {
		r.Slots = 64
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	return r
}

// qpConn is one RC (or OOO) queue pair with a registered staging buffer of
// slots.
type qpConn struct {
	dev      *roce.Device
	pd       *roce.PD
	cq       *roce.CQ
	qp       *roce.QP
	buf      []byte
	mr       *roce.MR
	psn      uint32
	gid      netip.Addr
	pmtu     roce.MTU // the largest path MTU this side's queue pair takes
	slotSize int
	slots    int
	// rel is the loss recovery this side offers (offer, before endpoint)
	// or, after connect, the one both sides use.
	rel roce.Reliability
	// srWin is, after connect with selective repeat, the peer's hold
	// (the send window's cap; 0: 256).
	srWin int
	// cc is likewise the congestion control (docs/cc.md).
	cc roce.CongestionControl
	// commit is an OOO put's server: the commit record's context
	// (ooo_commit.go).
	commit roce.Ctx
}

// newQPConn makes a queue pair of type typ (RC, or OOO: ooo.go) with a
// staging buffer of slots × slotSize bytes registered with access.
func newQPConn(dev *roce.Device, typ roce.QPType, slotSize, slots int, access roce.Access, local net.Addr) (*qpConn, error) {
	cqDepth, sendWR := 4*(slots+4), 2*(slots+4)
	if typ == roce.OOO {
		cqDepth, sendWR = 4*oooContexts, 2*oooContexts
	}
	q, err := newBareQP(dev, typ, cqDepth, sendWR, 4, local)
	if err != nil {
		return nil, err
	}
	q.slotSize, q.slots = slotSize, slots
	n := slotSize * slots
	if typ == roce.OOO {
		n += commitLen // the commit record's place (ooo_commit.go)
	}
	q.buf = make([]byte, n)
	if q.mr, err = q.pd.RegMR(q.buf, access); err != nil {
		q.close()
		return nil, fmt.Errorf("register %d bytes: %w", len(q.buf), err)
	}
	return q, nil
}

// newBareQP makes a protection domain, a completion queue of cqDepth for
// both queues and a queue pair of type typ with the given queue sizes; no
// memory.
func newBareQP(dev *roce.Device, typ roce.QPType, cqDepth, sendWR, recvWR int, local net.Addr) (*qpConn, error) {
	q := &qpConn{dev: dev, pd: dev.AllocPD(), pmtu: dev.PathMTU()}
	if typ == roce.OOO {
		q.pmtu = dev.OOOPathMTU()
	}
	var err error
	if q.cq, err = dev.CreateCQ(cqDepth); err != nil {
		q.close()
		return nil, fmt.Errorf("create cq: %w", err)
	}
	if q.qp, err = q.pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: q.cq, RecvCQ: q.cq,
		MaxSendWR: sendWR, MaxRecvWR: recvWR}); err != nil {
		q.close()
		return nil, fmt.Errorf("create qp: %w", err)
	}
	var b [4]byte
	rand.Read(b[:])
	q.psn = binary.LittleEndian.Uint32(b[:]) & roce.PSNMask
	q.gid = localGID(dev, local)
	return q, nil
}

// LocalGID is the device's GID for the local address of a control
// connection when it has one, else GID 1 (the first IPv4), else GID 0.
func LocalGID(dev *roce.Device, local net.Addr) netip.Addr { return localGID(dev, local) }

func localGID(dev *roce.Device, local net.Addr) netip.Addr {
	gids := dev.GIDs()
	if ta, ok := local.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			g := roce.GIDFromIP(ip.Unmap().WithZone(""))
			for _, x := range gids {
				if x == g {
					return g
				}
			}
		}
	}
	if len(gids) > 1 {
		return gids[1]
	}
	if len(gids) > 0 {
		return gids[0]
	}
	return netip.Addr{}
}

// endpoint fills m with this side's queue pair.
func (q *qpConn) endpoint(m *message) {
	m.QPN = q.qp.QPN()
	m.PSN = q.psn
	m.GID = q.gid.String()
	m.PathMTU = q.pmtu.Bytes()
	m.Link = q.dev.LinkName()
	if q.rel == roce.SelectiveRepeat {
		m.Reliability = roce.SelectiveRepeat.String()
		m.SRWindow = roce.SRHold
	}
	if q.cc == roce.DCQCN {
		m.CC = roce.DCQCN.String()
	}
}

// offer sets the loss recovery a client offers in its request: o's (RC
// only; nil: go-back-N).
func (q *qpConn) offer(o *roce.ConnectOptions) {
	if o != nil && q.qp.Type() == roce.RC {
		q.rel, q.cc = o.Reliability, o.CC
	}
}

// ask fills req with this side's queue pair, sends it and returns the
// peer's accept (an error message from the peer becomes an error).
func (q *qpConn) ask(c *ctrl, req *message) (*message, error) {
	q.endpoint(req)
	if err := c.send(req); err != nil {
		return nil, err
	}
	acc := new(message)
	if err := c.expect(acc, msgAccept); err != nil {
		return nil, ctxErr(c.ctx, err)
	}
	return acc, nil
}

// connect moves the queue pair to RTS towards the peer described by m.
func (q *qpConn) connect(m *message, o *roce.ConnectOptions) error {
	gid, err := netip.ParseAddr(m.GID)
	if err != nil {
		return fmt.Errorf("peer gid %q: %w", m.GID, err)
	}
	var co roce.ConnectOptions
	if o != nil {
		co = *o
	} else {
		co = roce.DefaultConnectOptions()
	}
	co.SGID = q.gid
	// Selective repeat only when this side wants it and the peer's
	// message says it does it too; otherwise go-back-N, as with rxe.
	if co.Reliability != roce.SelectiveRepeat || m.Reliability != roce.SelectiveRepeat.String() || q.qp.Type() != roce.RC {
		co.Reliability = roce.GoBackN
	}
	q.rel = co.Reliability
	co.SRWindow = m.SRWindow // what the peer holds past a hole (0: 256)
	if q.rel == roce.SelectiveRepeat {
		q.srWin = max(m.SRWindow, 0)
	}
	// DCQCN likewise: never towards a peer that did not say "dcqcn" (rxe
	// and older xdproce do not know CNPs).
	if co.CC != roce.DCQCN || m.CC != roce.DCQCN.String() || q.qp.Type() != roce.RC {
		co.CC = roce.CCNone
	}
	q.cc = co.CC
	mtu := q.pmtu.Bytes()
	if m.PathMTU > 0 && m.PathMTU < mtu {
		mtu = m.PathMTU
	}
	if co.PathMTU = roce.MTUFromBytes(mtu); co.PathMTU == 0 {
		return fmt.Errorf("peer path mtu %d: not an InfiniBand MTU", m.PathMTU)
	}
	if err := q.qp.Connect(q.psn, roce.Endpoint{QPN: m.QPN, PSN: m.PSN & roce.PSNMask, GID: gid}, &co); err != nil {
		return fmt.Errorf("connect qp to %s qpn %#x: %w", gid, m.QPN, err)
	}
	return nil
}

func (q *qpConn) slot(i int) []byte { return q.buf[i*q.slotSize : (i+1)*q.slotSize] }

func (q *qpConn) slotAddr(i int) uint64 { return q.mr.Addr() + uint64(i*q.slotSize) }

// wait returns the next completion, failing on an error status.
func (q *qpConn) wait(ctx context.Context, wcs []roce.WC) (roce.WC, error) {
	n, err := q.cq.Wait(ctx, wcs[:1])
	if err != nil {
		return roce.WC{}, err
	}
	if n == 0 {
		return roce.WC{}, fmt.Errorf("completion queue: no completion")
	}
	wc := wcs[0]
	if wc.Status != roce.WCSuccess {
		return wc, fmt.Errorf("rdma %v failed: %v", wc.Opcode, wc.Status)
	}
	return wc, nil
}

func (q *qpConn) close() { q.closeThen(nil) }

// closeThen destroys the queue pair (its outstanding work requests flush),
// then runs after (which may free what the work requests used) and frees the
// protection domain.
func (q *qpConn) closeThen(after func()) {
	// Deregister first: the peer's rkey is refused from here on.
	if q.mr != nil {
		q.mr.Deregister()
		q.mr = nil
	}
	if q.qp != nil {
		q.qp.Destroy()
		q.qp = nil
	}
	if after != nil {
		after()
	}
	if q.pd != nil {
		q.pd.Dealloc()
		q.pd = nil
	}
}
