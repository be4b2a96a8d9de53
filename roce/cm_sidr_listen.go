package roce

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// UD through the RDMA CM (RDMA_PS_UDP, as udaddy uses it): the active side
// sends a SIDR_REQ (service ID resolution request) to a service ID
// 0x0000000001110000 | port, the passive side answers with a SIDR_REP
// carrying the QPN and Q_Key of its UD queue pair. There is no connection:
// the passive side keeps its answers (sidrKeep of them) only to resend one
// for a retried request.

// UDPQKey is the Q_Key rdma_cm gives UD queue pairs of RDMA_PS_UDP
// (RDMA_UDP_QKEY): SIDRRequest.Accept activates a queue pair in RESET with it.
const UDPQKey = 0x01234567

// SIDRStatus is a SIDR_REP's status.
type SIDRStatus = rdmacm.SIDRStatus

// The SIDR_REP statuses an xdproce CM sends or callers test for.
const (
	SIDRUnsupported = rdmacm.SIDRUnsupported // nobody listens on the service ID
	SIDRReject      = rdmacm.SIDRReject      // the listener refused (SIDRRequest.Reject, an unreadable request, a full backlog)
	SIDRNoQP        = rdmacm.SIDRNoQP
)

// SIDRError is the error of a DialSIDR the peer answered with a SIDR_REP
// whose status is not success: the status and the private data (up to 136
// bytes, trailing zeros trimmed).
type SIDRError struct {
	Status      SIDRStatus
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	return "refused by the peer: SIDR_REP status " + e.Status.String()
}

// sidrKeep is how many answered SIDR_REQs the agent remembers (their
// SIDR_REPs, resent to a retry).
const sidrKeep = 256

// sidrKey names a SIDR_REQ: its sender and request ID.
type sidrKey struct {
	src   netip.Addr
	reqID uint32
}

// sidrIn is a SIDR_REQ received: pending (rep nil) until the application
// answers it, then its SIDR_REP.
type sidrIn struct {
	rep []byte
}

// A SIDRListener receives the SIDR requests for one rdma_cm port of
// RDMA_PS_UDP, as rdma_listen does on a UDP id.
type SIDRListener struct {
	a  *cmAgent
	at cmPort
	q  backlog[*SIDRRequest]
}

// ListenSIDR listens for SIDR_REQs to port: service ID 0x0000000001110000 |
// port. SIDR_REQs for a port nobody listens on are answered with status
// SIDRUnsupported. On a device attached to the xdproce daemon, the daemon
// must give the service ID to this device.
func (d *Device) ListenSIDR(port uint16) (*SIDRListener, error) {
	a, err := d.cm()
	if err != nil {
		return nil, fmt.Errorf("roce: sidr listen: %w", err)
	}
	l := &SIDRListener{a: a, at: cmPort{rdmacm.PSUDP, port}, q: newBacklog[*SIDRRequest]()}
	if err := a.listen(l.at, l); err != nil {
		return nil, fmt.Errorf("roce: sidr listen: %w", err)
	}
	return l, nil
}

// Port returns the rdma_cm port listened on.
func (l *SIDRListener) Port() uint16 { return l.at.port }

// Close stops listening; requests not yet accepted are answered with
// status SIDRReject.
func (l *SIDRListener) Close() error {
	err := l.a.unlisten(l.at, l)
	l.q.close()
	if err != nil {
		return fmt.Errorf("roce: sidr listener close: %w", err)
	}
	return nil
}

// Accept waits for the next SIDR request.
func (l *SIDRListener) Accept(ctx context.Context) (*SIDRRequest, error) {
	r, err := l.q.accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("roce: sidr accept: %w", err)
	}
	return r, nil
}

// A SIDRRequest is a SIDR_REQ waiting for Accept or Reject
// (RDMA_CM_EVENT_CONNECT_REQUEST on a UDP id).
type SIDRRequest struct {
	a     *cmAgent
	key   sidrKey
	tid   uint64
	sid   uint64
	entry *sidrIn
	// PrivateData is the SIDR_REQ's user data after the IP CM header (180
	// bytes, zero-padded as on the wire).
	PrivateData []byte
	// Remote is the active side's address and the port it announced.
	Remote netip.AddrPort
}

// inputSIDRReq answers a SIDR_REQ: a retry of one answered gets the kept
// SIDR_REP, one waiting for the application nothing; one to no UDP
// listener gets status SIDRUnsupported, an unreadable one (no IP CM header
// from the sender's address) or one past the backlog SIDRReject; any other
// waits for Accept.
func (a *cmAgent) inputSIDRReq(src netip.Addr, h rdmacm.Header, m *rdmacm.SIDRReq) {
	k := sidrKey{src, m.RequestID}
	a.mu.Lock()
	if e := a.sidrIn[k]; e != nil {
		rep := e.rep
		a.mu.Unlock()
		if rep != nil {
			a.sendRaw(src, rep) //nolint:errcheck // the peer resends its request
		}
		return
	}
	answer := func(st rdmacm.SIDRStatus) {
		a.mu.Unlock()
		rep := &rdmacm.SIDRRep{RequestID: m.RequestID, Status: st, ServiceID: m.ServiceID}
		a.send(src, rdmacm.CMHeader(h.TID), rep) //nolint:errcheck // the peer resends its request
	}
	ps, port, _ := rdmacm.ParseServiceID(m.ServiceID)
	l, _ := a.listeners[cmPort{ps, port}].(*SIDRListener)
	if l == nil {
		answer(rdmacm.SIDRUnsupported)
		return
	}
	iph, user, err := rdmacm.ParseIPHeader(m.PrivateData[:])
	if err != nil || iph.Src.Unmap() != src || l.q.full() {
		answer(rdmacm.SIDRReject)
		return
	}
	e := &sidrIn{}
	a.sidrIn[k] = e
	l.q.reqs <- &SIDRRequest{a: a, key: k, tid: h.TID, sid: m.ServiceID, entry: e,
		PrivateData: append([]byte(nil), user...), Remote: netip.AddrPortFrom(src, iph.SrcPort)}
	a.mu.Unlock()
}

// Accept answers the request with the QPN and Q_Key of the UD queue pair q
// and up to 136 bytes of priv (SIDR_REP status success), as rdma_accept
// does on a UDP id. A q in RESET is first activated with Q_Key UDPQKey (as
// rdma_create_qp does); one in RTS is announced with its own Q_Key.
func (r *SIDRRequest) Accept(q *QP, priv []byte) error {
	if q == nil || q.d != r.a.d || q.typ != UD {
		return errors.New("roce: sidr accept: the queue pair must be a UD queue pair of the CM's device")
	}
	if len(priv) > rdmacm.SIDRRepPrivateDataLen {
		return fmt.Errorf("roce: sidr accept: %d bytes of private data; a SIDR_REP carries at most %d", len(priv), rdmacm.SIDRRepPrivateDataLen)
	}
	if q.State() == StateReset {
		if err := q.Activate(UDPQKey, 0); err != nil {
			return fmt.Errorf("roce: sidr accept: %w", err)
		}
	}
	st, attr := q.Query()
	if st != StateRTS {
		return fmt.Errorf("roce: sidr accept: queue pair %#x is in %v, not RESET or RTS", q.QPN(), st)
	}
	rep := &rdmacm.SIDRRep{Status: rdmacm.SIDRSuccess, QPN: q.QPN(), QKey: attr.QKey}
	copy(rep.PrivateData[:], priv)
	if err := r.answer(rep); err != nil {
		return fmt.Errorf("roce: sidr accept: %w", err)
	}
	return nil
}

// Reject refuses the request (SIDR_REP status SIDRReject, with up to 136
// bytes of priv), as rdma_reject does on a UDP id.
func (r *SIDRRequest) Reject(priv []byte) error {
	if len(priv) > rdmacm.SIDRRepPrivateDataLen {
		return fmt.Errorf("roce: sidr reject: %d bytes of private data; a SIDR_REP carries at most %d", len(priv), rdmacm.SIDRRepPrivateDataLen)
	}
	rep := &rdmacm.SIDRRep{Status: rdmacm.SIDRReject}
	copy(rep.PrivateData[:], priv)
	if err := r.answer(rep); err != nil {
		return fmt.Errorf("roce: sidr reject: %w", err)
	}
	return nil
}

// answer sends rep for the request once and keeps it for retries.
func (r *SIDRRequest) answer(rep *rdmacm.SIDRRep) error {
	a := r.a
	rep.RequestID, rep.ServiceID = r.key.reqID, r.sid
	var mad [rdmacm.MADLen]byte
	if _, err := rdmacm.Encode(mad[:], rdmacm.CMHeader(r.tid), rep); err != nil {
		return err
	}
	a.mu.Lock()
	if r.entry.rep != nil || a.sidrIn[r.key] != r.entry {
		a.mu.Unlock()
		return errors.New("the request was already answered")
	}
	r.entry.rep = mad[:]
	a.keepSIDR(r.key)
	a.mu.Unlock()
	return a.sendRaw(r.key.src, mad[:])
}

// keepSIDR remembers the answered request k, forgetting the oldest answer
// beyond sidrKeep; a.mu is held.
func (a *cmAgent) keepSIDR(k sidrKey) {
	if len(a.sidrKept) < sidrKeep {
		a.sidrKept = append(a.sidrKept, k)
		return
	}
	delete(a.sidrIn, a.sidrKept[a.sidrNext])
	a.sidrKept[a.sidrNext] = k
	a.sidrNext = (a.sidrNext + 1) % sidrKeep
}
