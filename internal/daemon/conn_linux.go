package daemon

// Connected queue pairs (issue 17). RC and UC packets name no source QPN,
// so the switch cannot tell which queue pair of a client sent one; what it
// can check is whether the receiving queue pair is connected to that
// client. Each client registers its connected queue pairs with the daemon
// (proto.OpConnQP: local QPN → the peer's GID and QPN), which roce's
// Modify does before the queue pair enters RTR — before the verb returns,
// so before any frame of the connection can be taken — and forgets them on
// Reset and Destroy (proto.OpDisconnQP); a client's registrations go with
// it. A frame from client X for one of the interface's addresses, to a QPN
// of client Y, passes only when Y registered that QPN as connected to the
// frame's source address and a QPN that X owned when Y registered it;
// anything else is dropped and counted (drop_foreign_conn: X's and the
// daemon's). The opcodes checked are all but UD's (checked by their DETH
// source QPN, switch_linux.go) and OOO's: a third-party OOO operation's
// packets come from a queue pair the receiver is not connected to (the
// source streams to the sink, the sink completes to the controller; roce/qp
// ooo_3p.go), so those are left to the engine. QP1 is checked by
// communication ID (cm_linux.go); placement messages carry their source
// QPN, which the daemon checks against the client's range and the
// responder's registration (placeConnOK: a QPN of the sender's, the
// registered peer's) and the responder's engine against its queue pair's
// peer (place_linux.go). Frames from the wire are not checked here: a host on
// the wire is the engine's to check, as for a process owning the interface.

import (
	"fmt"
	"net/netip"
	"sync"
)

// connEntry is the peer a client's queue pair is connected to.
type connEntry struct {
	gid  [16]byte // the peer's GID (IPv4 as IPv4-mapped IPv6)
	qpn  uint32   // its QPN
	peer *client  // the client owning qpn when gid is the interface's (nil: a peer on the wire, or gone)
}

// conns are a client's connected queue pairs: at most one entry per QPN of
// its range. Written by its control requests and by release, read by every
// client's steering.
type conns struct {
	mu sync.RWMutex
	m  map[uint32]connEntry
}

// oooOps is the transport of the OOO opcodes (their top three bits).
const oooOps = 6

// connOK reports whether c's frame h, addressed to one of the interface's
// addresses, may go to the client owning its destination QPN as far as
// connections go.
func (d *Daemon) connOK(c *client, h *header) bool {
	if h.ud || h.op>>5 == oooOps || h.dqpn == qp1 || h.dqpn == mcastQPN {
		return true
	}
	to := d.owner(h.dqpn)
	if to == nil {
		return true // nobody's: steer drops and counts it
	}
	e, ok := to.peerOf(h.dqpn)
	return ok && e.peer == c && e.gid == h.src
}

// placeConnOK reports whether c's placement request from its queue pair
// src may go to queue pair dst of client to: one registered as connected
// to src. Placement messages carry no address; the source QPN is checked
// to be c's (placeRequest) and is the peer's here, so a queue pair of
// another client connected to a peer on the wire is out of c's reach even
// when that peer's QPN lies in c's range.
func placeConnOK(c, to *client, src, dst uint32) bool {
	e, ok := to.peerOf(dst)
	return ok && e.peer == c && e.qpn == src
}

// peerOf is the peer c's queue pair qpn is registered as connected to.
func (c *client) peerOf(qpn uint32) (connEntry, bool) {
	c.cn.mu.RLock()
	e, ok := c.cn.m[qpn]
	c.cn.mu.RUnlock()
	return e, ok
}

// connectQP registers c's queue pair qpn as connected to queue pair
// peerQPN at gid.
func (d *Daemon) connectQP(c *client, qpn uint32, gid string, peerQPN uint32) error {
	if qpn < c.first || qpn > c.last {
		return fmt.Errorf("qpn %#x not the client's", qpn)
	}
	if peerQPN <= qp1 || peerQPN >= mcastQPN {
		return fmt.Errorf("peer QPN %#x is no connected queue pair's", peerQPN)
	}
	a, err := netip.ParseAddr(gid)
	if err != nil {
		return fmt.Errorf("peer GID: %w", err)
	}
	e := connEntry{gid: a.As16(), qpn: peerQPN}
	if d.isLocal(&e.gid) {
		if p := d.owner(peerQPN); p != nil && peerQPN >= p.first && peerQPN <= p.last && !p.ending.Load() {
			e.peer = p
		}
	}
	c.cn.mu.Lock()
	defer c.cn.mu.Unlock()
	if c.cn.m == nil {
		c.cn.m = map[uint32]connEntry{}
	}
	c.cn.m[qpn] = e
	return nil
}

// disconnectQP forgets the peer of c's queue pair qpn.
func (d *Daemon) disconnectQP(c *client, qpn uint32) error {
	if qpn < c.first || qpn > c.last {
		return fmt.Errorf("qpn %#x not the client's", qpn)
	}
	c.cn.mu.Lock()
	delete(c.cn.m, qpn)
	c.cn.mu.Unlock()
	return nil
}

// forgetConns drops gone's registrations and makes every queue pair
// connected to one of gone's refuse what comes from its QPNs, whoever owns
// them next.
func (d *Daemon) forgetConns(gone *client) {
	gone.cn.mu.Lock()
	gone.cn.m = nil
	gone.cn.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.clients {
		c.cn.mu.Lock()
		for q, e := range c.cn.m {
			if e.peer == gone {
				e.peer = nil
				c.cn.m[q] = e
			}
		}
		c.cn.mu.Unlock()
	}
}

// connCount is the number of c's registered queue pairs.
func (c *client) connCount() int {
	c.cn.mu.RLock()
	defer c.cn.mu.RUnlock()
	return len(c.cn.m)
}
