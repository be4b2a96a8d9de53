package roce

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// DialCM connects the RC queue pair q (in RESET, or in INIT with receives posted) to the RDMA CM listener at
// dst (address and rdma_cm port, RDMA_PS_TCP), as rdma_connect does: it
// sends a REQ with librdmacm's IP CM header and up to 56 bytes of priv,
// resends it each response timeout, and on the REP takes q through RTR to
// RTS with the PSNs and QPN the MADs carry and answers RTU. ctx bounds the
// whole exchange. A REJ returns *CMRejectError; no answer through every
// retry an error matching ErrCMTimeout (the peer is sent a REJ timeout).
func (d *Device) DialCM(ctx context.Context, q *QP, dst netip.AddrPort, priv []byte, o *CMOptions) (*CMConn, error) {
	k, err := d.dialCM(ctx, q, dst, priv, o)
	if err != nil {
		return nil, fmt.Errorf("roce: cm dial %v: %w", dst, err)
	}
	return k, nil
}

func (d *Device) dialCM(ctx context.Context, q *QP, dst netip.AddrPort, priv []byte, o *CMOptions) (*CMConn, error) {
	opt := o.norm()
	co := opt.connectOptions()
	if err := checkCMQP(d, q); err != nil {
		return nil, err
	}
	if len(priv) > rdmacm.REQUserDataMax {
		return nil, fmt.Errorf("%d bytes of private data; a REQ carries at most %d", len(priv), rdmacm.REQUserDataMax)
	}
	peer := dst.Addr().Unmap()
	av, err := d.resolveAV(GIDFromIP(peer), co.SGID, false)
	if err != nil {
		return nil, err
	}
	a, err := d.cm()
	if err != nil {
		return nil, err
	}
	if co.PathMTU == 0 {
		co.PathMTU = d.pathMTU(RC)
	}
	srcPort := uint16(32768 + rand.IntN(28232)) // an ephemeral port, as the kernel picks one
	c := newCMConn(a, peer, cmReqSent)
	c.qp = q
	a.register(c)
	c.tid = uint64(a.tidHi)<<32 | uint64(c.localID)
	c.timeout, c.retries = opt.ResponseTimeout, opt.MaxRetries
	req := &rdmacm.REQ{
		LocalCommID: c.localID, ServiceID: rdmacm.ServiceID(rdmacm.PSTCP, dst.Port()),
		LocalCAGUID: a.guid, LocalQPN: q.QPN(),
		ResponderResources: opt.ResponderResources, InitiatorDepth: opt.InitiatorDepth,
		RemoteCMResponseTimeout: opt.ResponseTimeout, TransportService: rdmacm.TransportRC,
		StartingPSN: rand.Uint32() & 0xFFFFFF, LocalCMResponseTimeout: opt.ResponseTimeout,
		RetryCount: min(co.RetryCnt, 7), PKey: 0xFFFF, PathMTU: uint8(co.PathMTU),
		RNRRetryCount: min(co.RNRRetry, 7), MaxCMRetries: opt.MaxRetries,
		Primary: rdmacm.Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF,
			LocalGID: GIDFromIP(av.SrcIP).As16(), RemoteGID: GIDFromIP(peer).As16(),
			FlowLabel: (uint32(srcPort)*31 + uint32(dst.Port())) & 0xFFFFF, TrafficClass: co.TOS,
			HopLimit: 64, LocalACKTimeout: min(co.Timeout, 31)},
	}
	if err := (rdmacm.IPHeader{SrcPort: srcPort, Src: av.SrcIP, Dst: peer}).Put(req.PrivateData[:], priv); err != nil {
		a.forget(c)
		return nil, err
	}
	mad, err := a.send(peer, rdmacm.CMHeader(c.tid), req)
	if err != nil {
		a.forget(c)
		return nil, err
	}
	m, err := c.exchange(ctx, mad, opt.ResponseTimeout, opt.MaxRetries, rdmacm.AttrREP)
	if err != nil {
		a.forget(c)
		return nil, err
	}
	rep := m.(*rdmacm.REP)
	co.MaxRdAtomic = min(opt.InitiatorDepth, rep.ResponderResources)
	co.MaxDestRdAtomic = opt.ResponderResources
	c.mu.Lock()
	c.remoteID, c.remoteQPN = rep.LocalCommID, rep.LocalQPN
	c.mu.Unlock()
	// As Linux does: the active side sends from the REP's starting PSN and
	// receives from the REQ's (the rxe captures).
	if err := q.Connect(rep.StartingPSN, Endpoint{QPN: rep.LocalQPN, PSN: req.StartingPSN, GID: GIDFromIP(peer)}, &co); err != nil {
		rej := &rdmacm.REJ{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: rdmacm.MsgREP, Reason: rdmacm.RejNoQP}
		a.send(peer, rdmacm.CMHeader(c.tid), rej) //nolint:errcheck // the peer times out otherwise
		c.fail(err)
		return nil, err
	}
	rtu := &rdmacm.RTU{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	last, err := a.send(peer, rdmacm.CMHeader(c.tid), rtu)
	if err != nil {
		c.fail(err)
		return nil, err
	}
	c.mu.Lock()
	c.last, c.state = last, cmEstablished
	c.mu.Unlock()
	a.established(c)
	return &CMConn{c: c, PrivateData: append([]byte(nil), rep.PrivateData[:]...), Remote: netip.AddrPortFrom(peer, dst.Port())}, nil
}
