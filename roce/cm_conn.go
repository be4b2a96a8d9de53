package roce

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// CMOptions tune an RDMA CM exchange (DialCM, ListenCM). The zero value is
// what Linux's rdma_cm uses: response timeout 20 (≈ 4.3 s), 15 retries.
type CMOptions struct {
	// ResponseTimeout is the CM response timeout code (4.096 µs · 2^n, at
	// most 31) this side announces and waits for a reply with before it
	// resends; 0 means 20. A REQ carries it as both its local and remote
	// CM response timeout, so the passive side waits as long for an RTU.
	ResponseTimeout uint8
	// MaxRetries is how often a CM message is resent before the exchange
	// fails with ErrCMTimeout (at most 15); 0 means 15.
	MaxRetries uint8
	// ResponderResources and InitiatorDepth are the READ/atomic requests
	// this side accepts and issues at once (0: 16 each, as
	// DefaultConnectOptions, unless ExactResources).
	ResponderResources, InitiatorDepth uint8
	// ExactResources takes ResponderResources and InitiatorDepth as given,
	// 0 included: no READ or atomic that way, as rdma_conn_param's zeros
	// (perftest's -R on write and send tests asks for 0 and 0).
	ExactResources bool
	// Connect holds the queue pair attributes (nil: DefaultConnectOptions);
	// PSNs, the remote QPN, path MTU and READ depths come from the MADs.
	Connect *ConnectOptions
}

func (o *CMOptions) norm() CMOptions {
	var r CMOptions
	if o != nil {
		r = *o
	}
	if r.ResponseTimeout == 0 {
		r.ResponseTimeout = 20
	}
	r.ResponseTimeout = min(r.ResponseTimeout, 31)
	if r.MaxRetries == 0 {
		r.MaxRetries = 15
	}
	r.MaxRetries = min(r.MaxRetries, 15)
	if r.ResponderResources == 0 && !r.ExactResources {
		r.ResponderResources = 16
	}
	if r.InitiatorDepth == 0 && !r.ExactResources {
		r.InitiatorDepth = 16
	}
	return r
}

// connectOptions are the queue pair attributes o asks for.
func (o *CMOptions) connectOptions() ConnectOptions {
	if o.Connect != nil {
		return *o.Connect
	}
	return DefaultConnectOptions()
}

// checkCMQP checks that q can be connected by the CM of d: an RC queue
// pair of d in RESET, or in INIT (where rdma_create_qp leaves it, so that
// receives can be posted before the peer may send).
func checkCMQP(d *Device, q *QP) error {
	if q == nil || q.d != d || q.typ != RC {
		return errors.New("the queue pair must be an RC queue pair of the CM's device")
	}
	if st := q.State(); st != StateReset && st != StateInit {
		return fmt.Errorf("queue pair %#x is in %v, not RESET or INIT", q.QPN(), st)
	}
	return nil
}

// CMRejectReason is a REJ's reason code.
type CMRejectReason = rdmacm.RejectReason

// The reject reasons an xdproce CM sends or callers test for.
const (
	CMRejTimeout          = rdmacm.RejTimeout
	CMRejInvalidServiceID = rdmacm.RejInvalidServiceID
	CMRejInvalidTransport = rdmacm.RejInvalidTransportType
	CMRejStaleConnection  = rdmacm.RejStaleConnection
	CMRejConsumerDefined  = rdmacm.RejConsumerDefined
	CMRejNoResources      = rdmacm.RejNoResources
	CMRejInvalidCommID    = rdmacm.RejInvalidCommID
	CMRejInvalidMTU       = rdmacm.RejInvalidMTU
)

// CMRejectError is the error of a DialCM or Accept the peer answered with a
// REJ: its reason and private data (a consumer reject's data, up to 148
// bytes).
type CMRejectError struct {
	Reason      CMRejectReason
	PrivateData []byte
}

func (e *CMRejectError) Error() string { return "rejected by the peer: " + e.Reason.String() }

// ErrCMTimeout is matched by the error of an exchange whose message went
// unanswered through every retry.
var ErrCMTimeout = errors.New("no answer from the peer's CM")

type cmState uint8

const (
	cmReqSent     cmState = iota + 1 // active: REQ out, waiting for REP
	cmReqRcvd                        // passive: REQ in, waiting for Accept or Reject
	cmRepSent                        // passive: REP out, waiting for RTU
	cmEstablished                    // RTU sent or received
	cmDreqSent                       // DREQ out, waiting for DREP
	cmTimewait                       // disconnected (DREP sent or received)
	cmFailed                         // rejected or timed out
)

// cmConn is one connection's CM state: who the peer is, the communication
// IDs, the last message to resend on a duplicate, and a channel for the
// replies the goroutine driving the exchange (DialCM, Accept, Disconnect)
// waits for.
type cmConn struct {
	a        *cmAgent
	peer     netip.Addr
	localID  uint32
	tid      uint64
	msgs     chan rdmacm.Message
	done     chan struct{} // closed on disconnect or failure
	doneOnce sync.Once

	mu        sync.Mutex
	state     cmState
	remoteID  uint32
	remoteQPN uint32
	qp        *QP
	last      []byte // the REP (passive) or RTU (active), resent on a duplicate REQ or REP
	drep      []byte // the DREP sent, resent on a duplicate DREQ
	timeout   uint8  // the peer's response timeout code, for waits on it
	retries   uint8
	err       error
}

func newCMConn(a *cmAgent, peer netip.Addr, st cmState) *cmConn {
	return &cmConn{a: a, peer: peer, state: st, msgs: make(chan rdmacm.Message, 8), done: make(chan struct{})}
}

// input handles a message of this connection (any but REQ).
func (c *cmConn) input(src netip.Addr, h rdmacm.Header, m rdmacm.Message) {
	if src != c.peer {
		return
	}
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	switch m := m.(type) {
	case *rdmacm.REP:
		if st == cmEstablished && c.last != nil {
			c.a.sendRaw(c.peer, c.last) //nolint:errcheck // our RTU was lost: the peer resends its REP
			return
		}
		if st == cmReqSent {
			c.post(m)
		}
	case *rdmacm.RTU:
		if st == cmRepSent {
			c.post(m)
		}
	case *rdmacm.MRA, *rdmacm.DREP:
		c.post(m)
	case *rdmacm.REJ:
		switch st {
		case cmReqSent, cmRepSent, cmDreqSent:
			c.post(m)
		case cmReqRcvd, cmEstablished:
			c.fail(&CMRejectError{Reason: m.Reason, PrivateData: trimZeros(m.PrivateData[:])})
		}
	case *rdmacm.DREQ:
		c.inputDREQ(h, m)
	}
}

// post hands m to the goroutine driving the exchange; a full queue drops it
// (the peer resends).
func (c *cmConn) post(m rdmacm.Message) {
	select {
	case c.msgs <- m:
	default:
	}
}

// inputDREQ answers a DREQ with DREP and takes the queue pair to ERROR
// (outstanding work requests flush), as rdma_cm does on
// RDMA_CM_EVENT_DISCONNECTED; a duplicate gets the same DREP again.
func (c *cmConn) inputDREQ(h rdmacm.Header, m *rdmacm.DREQ) {
	if c.answerDREQ(h, m) {
		c.a.forget(c) // a duplicate DREQ is answered by the agent (orphan)
	}
}

func (c *cmConn) answerDREQ(h rdmacm.Header, m *rdmacm.DREQ) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case cmTimewait:
		if c.drep != nil {
			c.a.sendRaw(c.peer, c.drep) //nolint:errcheck
		}
		return false
	case cmEstablished, cmRepSent, cmDreqSent:
	default:
		return false
	}
	if c.qp != nil && m.RemoteQPN != c.qp.QPN() {
		return false
	}
	drep := &rdmacm.DREP{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	c.drep, _ = c.a.send(c.peer, rdmacm.CMHeader(h.TID), drep)
	if c.state == cmDreqSent {
		c.post(drep) // both sides disconnected at once: ours is done too
	}
	c.state = cmTimewait
	c.stopQP()
	c.closeDone(nil)
	return true
}

// stopQP moves the connection's queue pair to ERROR; c.mu is held.
func (c *cmConn) stopQP() {
	if c.qp != nil && !c.qp.e.dead.Load() {
		_ = c.qp.Modify(&Attr{State: StateError}, AttrState)
	}
}

// fail ends the connection with err: the queue pair goes to ERROR and the
// connection leaves the agent's tables.
func (c *cmConn) fail(err error) {
	c.mu.Lock()
	if c.state != cmTimewait {
		c.state = cmFailed
	}
	c.stopQP()
	c.mu.Unlock()
	c.closeDone(err)
	c.a.forget(c)
}

func (c *cmConn) closeDone(err error) {
	c.doneOnce.Do(func() {
		c.err = err
		close(c.done)
	})
}

// exchange waits for the reply want to mad (sent once already), resending
// mad each time timeout passes (an MRA adds its service timeout once) up
// to retries times. A REJ ends it with *CMRejectError; no reply with
// ErrCMTimeout, after telling the peer (REJ timeout) when the connection is
// being set up.
func (c *cmConn) exchange(ctx context.Context, mad []byte, timeout, retries uint8, want rdmacm.AttrID) (rdmacm.Message, error) {
	wait := rdmacm.Timeout(timeout)
	t := time.NewTimer(wait)
	defer t.Stop()
	for tries := 0; ; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			if c.err != nil {
				return nil, c.err
			}
			return nil, errDisconnected
		case m := <-c.msgs:
			switch m := m.(type) {
			case *rdmacm.REJ:
				return nil, &CMRejectError{Reason: m.Reason, PrivateData: trimZeros(m.PrivateData[:])}
			case *rdmacm.MRA:
				t.Reset(wait + rdmacm.Timeout(m.ServiceTimeout))
				continue
			}
			if m.AttrID() == want {
				return m, nil
			}
		case <-t.C:
			if tries == int(retries) {
				switch want {
				case rdmacm.AttrREP:
					c.rejectTimeout(rdmacm.MsgREQ)
				case rdmacm.AttrRTU:
					c.rejectTimeout(rdmacm.MsgREP)
				}
				return nil, fmt.Errorf("%d tries %v apart: %w", tries+1, wait, ErrCMTimeout)
			}
			tries++
			c.a.resent.Add(1)
			if err := c.a.sendRaw(c.peer, mad); err != nil {
				return nil, err
			}
			t.Reset(wait)
		}
	}
}

// rejectTimeout tells the peer this side gave up waiting (REJ timeout, the
// ARI carrying our CA GUID, as Linux sends it).
func (c *cmConn) rejectTimeout(kind rdmacm.MsgKind) {
	rej := &rdmacm.REJ{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: kind,
		Reason: rdmacm.RejTimeout, ARILength: 8}
	for i := range 8 {
		rej.ARI[i] = byte(c.a.guid >> (56 - 8*i))
	}
	c.a.send(c.peer, rdmacm.CMHeader(c.tid), rej) //nolint:errcheck // best effort: the peer times out anyway
}

// trimZeros returns b without its trailing zero bytes (a copy).
func trimZeros(b []byte) []byte {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return append([]byte(nil), b[:n]...)
}

// A CMConn is an RC connection set up by the RDMA CM: its queue pair is in
// RTS, connected to the peer's.
type CMConn struct {
	c *cmConn
	// PrivateData is what the peer sent: the REP's private data (196 bytes)
	// on the active side, the REQ's user data after the IP CM header (56
	// bytes) on the passive side.
	PrivateData []byte
	// Remote is the peer's address and port: for the active side the
	// address and port dialed, for the passive side the address and the
	// port the active side announced in its IP CM header.
	Remote netip.AddrPort
}

// QP returns the connection's queue pair.
func (k *CMConn) QP() *QP { return k.c.qp }

// Done is closed when the connection ends: the peer disconnected (its
// DREQ was answered and the queue pair moved to ERROR) or Disconnect ran.
func (k *CMConn) Done() <-chan struct{} { return k.c.done }

// Disconnect sends DREQ, waits for DREP (resending as the CM options
// said; ctx bounds the wait) and moves the queue pair to ERROR, whose
// outstanding work requests flush. Without a DREP it still disconnects
// locally and returns an error matching ErrCMTimeout. Calling it after the
// peer disconnected returns nil.
func (k *CMConn) Disconnect(ctx context.Context) error {
	c := k.c
	c.mu.Lock()
	if c.state != cmEstablished && c.state != cmRepSent {
		c.mu.Unlock()
		return nil
	}
	c.state = cmDreqSent
	c.mu.Unlock()
	dreq := &rdmacm.DREQ{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
	mad, err := c.a.send(c.peer, rdmacm.CMHeader(c.tid), dreq)
	if err == nil {
		_, err = c.exchange(ctx, mad, c.timeout, c.retries, rdmacm.AttrDREP)
	}
	c.mu.Lock()
	c.state = cmTimewait
	c.stopQP()
	c.mu.Unlock()
	c.closeDone(nil)
	c.a.forget(c)
	if err != nil && !errors.Is(err, errDisconnected) {
		return fmt.Errorf("roce: cm disconnect: %w", err)
	}
	return nil
}

var errDisconnected = errors.New("disconnected")
