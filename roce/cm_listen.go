package roce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// A CMListener receives the RDMA CM connection requests for one rdma_cm
// port (RDMA_PS_TCP) of a device, as rdma_listen does.
type CMListener struct {
	a   *cmAgent
	at  cmPort
	opt CMOptions
	q   backlog[*CMRequest]
}

// ListenCM listens for RDMA CM requests to port: REQs with service ID
// 0x0000000001060000 | port. REQs for a port nobody listens on are answered
// with REJ invalid service ID.
// On a device attached to the xdproce daemon, the daemon must give the
// service ID to this device (another of its clients may hold it).
func (d *Device) ListenCM(port uint16, o *CMOptions) (*CMListener, error) {
	a, err := d.cm()
	if err != nil {
		return nil, fmt.Errorf("roce: cm listen: %w", err)
	}
	l := &CMListener{a: a, at: cmPort{rdmacm.PSTCP, port}, opt: o.norm(), q: newBacklog[*CMRequest]()}
	if err := a.listen(l.at, l); err != nil {
		return nil, fmt.Errorf("roce: cm listen: %w", err)
	}
	return l, nil
}

// Port returns the rdma_cm port listened on.
func (l *CMListener) Port() uint16 { return l.at.port }

// Close stops listening; requests not yet accepted are rejected (consumer
// defined).
func (l *CMListener) Close() error {
	err := l.a.unlisten(l.at, l)
	l.q.close()
	if err != nil {
		return fmt.Errorf("roce: cm listener close: %w", err)
	}
	return nil
}

// Accept waits for the next connection request.
func (l *CMListener) Accept(ctx context.Context) (*CMRequest, error) {
	r, err := l.q.accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("roce: cm accept: %w", err)
	}
	return r, nil
}

// A CMRequest is a connection request waiting for Accept or Reject
// (RDMA_CM_EVENT_CONNECT_REQUEST).
type CMRequest struct {
	l   *CMListener
	c   *cmConn
	req rdmacm.REQ
	// PrivateData is the REQ's user data after the IP CM header (56 bytes,
	// zero-padded as on the wire).
	PrivateData []byte
	// Remote is the active side's address and the port it announced.
	Remote netip.AddrPort
}

// inputREQ handles a REQ: a duplicate (a retry) is answered with the REP
// already sent or dropped while the application decides; a REQ to no
// listener gets REJ invalid service ID, one from a queue pair already
// connected here REJ stale connection; otherwise it waits for Accept.
func (a *cmAgent) inputREQ(src netip.Addr, h rdmacm.Header, m *rdmacm.REQ) {
	a.mu.Lock()
	if c := a.byRemote[cmRemote{src, m.LocalCommID}]; c != nil {
		a.mu.Unlock()
		c.mu.Lock()
		last, st := c.last, c.state
		c.mu.Unlock()
		if st == cmRepSent && last != nil {
			a.sendRaw(src, last) //nolint:errcheck // the peer resends its REQ
		}
		return
	}
	reject := func(reason rdmacm.RejectReason) {
		a.mu.Unlock()
		rej := &rdmacm.REJ{RemoteCommID: m.LocalCommID, MessageRejected: rdmacm.MsgREQ, Reason: reason}
		a.send(src, rdmacm.CMHeader(h.TID), rej) //nolint:errcheck // the peer resends its REQ
	}
	ps, port, _ := rdmacm.ParseServiceID(m.ServiceID)
	l, _ := a.listeners[cmPort{ps, port}].(*CMListener)
	switch {
	case l == nil:
		reject(rdmacm.RejInvalidServiceID)
		return
	case m.TransportService != rdmacm.TransportRC:
		reject(rdmacm.RejInvalidTransportType)
		return
	case a.byPeerQP[cmPeerQP{src, m.LocalQPN}] != nil:
		reject(rdmacm.RejStaleConnection)
		return
	}
	iph, user, err := rdmacm.ParseIPHeader(m.PrivateData[:])
	if err != nil || iph.Src.Unmap() != src {
		reject(rdmacm.RejConsumerDefined) // what Linux's rdma_cm answers a REQ it cannot read
		return
	}
	c := newCMConn(a, src, cmReqRcvd)
	c.remoteID, c.remoteQPN, c.tid = m.LocalCommID, m.LocalQPN, h.TID
	c.timeout, c.retries = m.LocalCMResponseTimeout, m.MaxCMRetries
	r := &CMRequest{l: l, c: c, req: *m, PrivateData: append([]byte(nil), user...),
		Remote: netip.AddrPortFrom(src, iph.SrcPort)}
	if l.q.full() {
		reject(rdmacm.RejNoResources)
		return
	}
	c.localID = a.newCommID()
	a.conns[c.localID] = c
	a.peak = max(a.peak, len(a.conns))
	a.byRemote[cmRemote{src, m.LocalCommID}] = c
	l.q.reqs <- r // only this goroutine sends, under a.mu: there is room
	a.mu.Unlock()
}

// Reject refuses the request (REJ consumer defined, with up to 148 bytes
// of priv), as rdma_reject does.
func (r *CMRequest) Reject(priv []byte) error {
	c := r.c
	if len(priv) > rdmacm.REJPrivateDataLen {
		return fmt.Errorf("roce: cm reject: %d bytes of private data; a REJ carries at most %d", len(priv), rdmacm.REJPrivateDataLen)
	}
	rej := &rdmacm.REJ{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: rdmacm.MsgREQ,
		Reason: rdmacm.RejConsumerDefined}
	copy(rej.PrivateData[:], priv)
	_, err := c.a.send(c.peer, rdmacm.CMHeader(c.tid), rej)
	c.fail(errors.New("rejected"))
	if err != nil {
		return fmt.Errorf("roce: cm reject: %w", err)
	}
	return nil
}

// Accept connects the RC queue pair q (in RESET, or in INIT with receives posted) to the requester, as
// rdma_accept does: q goes through RTR to RTS with the PSNs and QPN the MADs
// carry, the REP (with up to 196 bytes of priv) is sent and resent each of
// the requester's response timeouts, as often as its REQ allows, until the
// RTU arrives. No RTU: the requester is sent REJ timeout, q goes to ERROR
// and the error matches ErrCMTimeout.
func (r *CMRequest) Accept(ctx context.Context, q *QP, priv []byte) (*CMConn, error) {
	k, err := r.accept(ctx, q, priv)
	if err != nil {
		return nil, fmt.Errorf("roce: cm accept: %w", err)
	}
	return k, nil
}

func (r *CMRequest) accept(ctx context.Context, q *QP, priv []byte) (*CMConn, error) {
	c, a, req, opt := r.c, r.c.a, &r.req, r.l.opt
	if len(priv) > rdmacm.REPPrivateDataLen {
		return nil, fmt.Errorf("%d bytes of private data; a REP carries at most %d", len(priv), rdmacm.REPPrivateDataLen)
	}
	if err := checkCMQP(a.d, q); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.state != cmReqRcvd {
		err := c.err
		c.mu.Unlock()
		if err == nil {
			err = errors.New("the request was already answered")
		}
		return nil, err
	}
	c.qp = q
	c.mu.Unlock()
	co := opt.connectOptions()
	mtu := a.d.pathMTU(RC)
	if co.PathMTU != 0 {
		mtu = co.PathMTU
	}
	co.PathMTU = min(mtu, MTU(req.PathMTU))
	co.RetryCnt, co.RNRRetry = req.RetryCount, req.RNRRetryCount
	co.MaxRdAtomic = min(opt.InitiatorDepth, req.ResponderResources)
	co.MaxDestRdAtomic = min(opt.ResponderResources, max(req.InitiatorDepth, 1))
	co.SGID = GIDFromIP(netip.AddrFrom16(req.Primary.RemoteGID))
	psn := rand.Uint32() & 0xFFFFFF
	if co.PathMTU < MTU256 {
		c.rejectWith(rdmacm.RejInvalidMTU)
		return nil, fmt.Errorf("the REQ's path MTU %d is invalid", req.PathMTU)
	}
	// The passive side sends from the REQ's starting PSN and receives from
	// the REP's.
	if err := q.Connect(req.StartingPSN, Endpoint{QPN: req.LocalQPN, PSN: psn, GID: GIDFromIP(c.peer)}, &co); err != nil {
		c.rejectWith(rdmacm.RejNoQP)
		return nil, err
	}
	rep := &rdmacm.REP{LocalCommID: c.localID, RemoteCommID: c.remoteID, LocalQPN: q.QPN(), StartingPSN: psn,
		ResponderResources: co.MaxDestRdAtomic, InitiatorDepth: co.MaxRdAtomic, TargetACKDelay: 15,
		RNRRetryCount: min(co.RNRRetry, 7), LocalCAGUID: a.guid}
	copy(rep.PrivateData[:], priv)
	mad, err := a.send(c.peer, rdmacm.CMHeader(c.tid), rep)
	if err != nil {
		c.fail(err)
		return nil, err
	}
	c.mu.Lock()
	c.last, c.state = mad, cmRepSent
	c.mu.Unlock()
	_, err = c.exchange(ctx, mad, c.timeout, c.retries, rdmacm.AttrRTU)
	if err != nil {
		c.fail(err)
		return nil, err
	}
	c.mu.Lock()
	if c.state == cmRepSent {
		c.state = cmEstablished
	}
	c.mu.Unlock()
	a.established(c)
	return &CMConn{c: c, PrivateData: r.PrivateData, Remote: r.Remote}, nil
}

// rejectWith refuses the request with reason and ends it.
func (c *cmConn) rejectWith(reason rdmacm.RejectReason) {
	rej := &rdmacm.REJ{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: rdmacm.MsgREQ, Reason: reason}
	c.a.send(c.peer, rdmacm.CMHeader(c.tid), rej) //nolint:errcheck // best effort
	c.fail(fmt.Errorf("rejected: %v", reason))
}

// established records c as connected to the peer's queue pair (a new REQ
// from that queue pair is then stale).
func (a *cmAgent) established(c *cmConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conns[c.localID] == c {
		a.byPeerQP[cmPeerQP{c.peer, c.remoteQPN}] = c
	}
}
