package daemon

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/roce/place"
)

// counters are the daemon's own, beside each client's.
type counters struct {
	wireRx, wireTx atomic.Uint64 // frames received from and sent to the interface
	switched       atomic.Uint64 // frames from one client delivered to another (or itself)
	dropNoOwner    atomic.Uint64 // frames for a QPN no client owns
	dropConn       atomic.Uint64 // client RC/UC frames to a local queue pair not connected to the sender (conn_linux.go)
	dropQP1        atomic.Uint64 // frames for QP1 no client takes and the daemon does not answer
	cmAnswered     atomic.Uint64 // CM MADs for no client the daemon answered (REJ, DREP, SIDR_REP)
	groupFrames    atomic.Uint64 // multicast frames delivered to clients (one per member)
	dropWireBad    atomic.Uint64 // frames from the wire that are not RoCEv2
	egressFull     atomic.Uint64 // times a client waited for room to the wire
	wireErrors     atomic.Uint64 // uplink Receive or Send errors
	wireNoBuffer   atomic.Uint64 // rounds the uplink had no transmit buffer for a queued frame
	dropNoNeighbor atomic.Uint64 // client frames without a destination MAC whose next hop is not resolved yet
	uplinkHdr      header
	uplinkRx       [rxBatch][]byte
	uplinkTx       [rxBatch][]byte
}

// Stats returns the daemon's counters and its clients'.
func (d *Daemon) Stats() Stats {
	st := Stats{WireRx: d.st.wireRx.Load(), WireTx: d.st.wireTx.Load(), Switched: d.st.switched.Load(),
		DropNoOwner: d.st.dropNoOwner.Load(), DropQP1: d.st.dropQP1.Load(), CMAnswered: d.st.cmAnswered.Load(),
		GroupFrames: d.st.groupFrames.Load(), DropWireBad: d.st.dropWireBad.Load(),
		EgressFull: d.st.egressFull.Load(), WireErrors: d.st.wireErrors.Load(), DropNoNeighbor: d.st.dropNoNeighbor.Load(),
		DropForeignConn: d.st.dropConn.Load()}
	d.plMu.Lock()
	st.Placed, st.PlacedBytes, st.PlaceFallbacks = d.pl.placed, d.pl.placedBytes, d.pl.fallbacks
	st.PlaceAnswered, st.PlaceBad, st.PlaceFailed = d.pl.answered, d.pl.bad, d.pl.failed
	st.PlaceGranted = d.pl.granted
	d.plMu.Unlock()
	d.mu.Lock()
	d.svc.mu.Lock()
	d.grp.mu.Lock()
	d.memMu.RLock()
	for _, c := range d.clients {
		st.Clients = append(st.Clients, ClientStats{ID: c.id, PID: c.pid, UID: c.uid, GID: c.gid, Command: c.cmd,
			QPNFirst: c.first, QPNLast: c.last, Since: c.since, FromClient: c.fromClient.Load(),
			ToClient: c.toClient.Load(), DropForeign: c.dropForeign.Load(), DropForeignConn: c.dropConn.Load(),
			Conns: c.connCount(), DropBadSource: c.dropBadSource.Load(),
			DropMalformed: c.dropMalformed.Load(), Overflow: c.overflow.Load(), Services: c.services, Groups: c.groups,
			Regions: len(c.mem.m), SharedBytes: c.mem.bytes})
	}
	d.memMu.RUnlock()
	d.grp.mu.Unlock()
	d.svc.mu.Unlock()
	d.mu.Unlock()
	return st
}

// fromClient steers one frame read from c's port. Its header is copied out
// of the shared memory first and only the copy is read and forwarded.
func (d *Daemon) fromClient(c *client, frame []byte) {
	c.fromClient.Add(1)
	if place.Is(frame) {
		d.fromClientPlace(c, frame) // place_linux.go
		return
	}
	n := copy(c.snap[:], frame)
	snap := c.snap[:n]
	h := &c.hdr
	if !parse(snap, h) {
		c.dropMalformed.Add(1)
		return
	}
	if !d.isLocal(&h.src) {
		c.dropBadSource.Add(1)
		return
	}
	if h.ud && h.sqpn == qp1 {
		d.fromClientQP1(c, frame)
		return
	}
	if h.ud && (h.sqpn < c.first || h.sqpn > c.last) {
		c.dropForeign.Add(1)
		return
	}
	if d.isLocal(&h.dst) {
		if !d.connOK(c, h) {
			c.dropConn.Add(1)
			d.st.dropConn.Add(1)
			return
		}
		if d.steer(h, frame, snap) {
			d.st.switched.Add(1)
		}
		return
	}
	if h.dqpn == mcastQPN && d.fanOut(h, frame, snap, c) {
		d.st.switched.Add(1)
	}
	d.toWire(c, frame, snap, h)
}

// toWire sends c's frame (its header replaced by snap, the private copy h
// was read from) to the interface, with the interface's MAC as its source:
// copied into a transmit buffer of the uplink that goes out at the end of
// c's batch, or, when the uplink has none free, queued for the uplink
// goroutine.
func (d *Daemon) toWire(c *client, frame, snap []byte, h *header) {
	copy(snap[6:12], d.hw[:])
	if snap[0]|snap[1]|snap[2]|snap[3]|snap[4]|snap[5] == 0 && d.up.HWAddr != nil && !d.neigh.lookup(&h.dst, snap[:6]) {
		d.st.dropNoNeighbor.Add(1)
		return
	}
	if d.eg.put(&c.wire, d.up.Link, frame, snap, &d.st) {
		return
	}
	if d.eg.push(frame, snap, d.up.Link) {
		d.st.egressFull.Add(1)
	}
}

// fromWire steers a frame the uplink received.
func (d *Daemon) fromWire(frame []byte) {
	h := &d.st.uplinkHdr
	if !parse(frame, h) {
		d.st.dropWireBad.Add(1)
		return
	}
	d.steer(h, frame, nil)
}

// steer delivers frame (its header replaced by hdr when not nil), whose
// header h says, to the client owning its destination QPN (QP1: the client
// its MAD is for); it reports whether there was one.
func (d *Daemon) steer(h *header, frame, hdr []byte) bool {
	qpn := h.dqpn
	switch qpn {
	case qp1:
		return d.steerQP1(frame, hdr, h)
	case mcastQPN:
		if d.fanOut(h, frame, hdr, nil) {
			return true
		}
		d.st.dropNoOwner.Add(1)
		return false
	}
	to := d.owner(qpn)
	switch {
	case to == nil:
		d.st.dropNoOwner.Add(1)
	default:
		to.deliver(frame, hdr)
		return true
	}
	return false
}

// uplink owns the interface's link: it steers what arrives and sends what
// the clients queued, until the link closes.
func (d *Daemon) uplink() {
	defer close(d.upDone)
	l := d.up.Link
	rx := d.st.uplinkRx[:]
	for {
		n, err := l.Receive(rx)
		if err != nil {
			if isClosed(err) {
				return
			}
			d.st.wireErrors.Add(1)
		}
		d.st.wireRx.Add(uint64(n))
		for i := range n {
			d.fromWire(rx[i])
		}
		left := d.eg.drain(l, d.st.uplinkTx[:], &d.st)
		if n == len(rx) {
			continue
		}
		timeout := time.Duration(-1)
		if left {
			timeout = 50 * time.Microsecond // the link had no transmit buffer
		}
		if err := l.Wait(timeout); err != nil && isClosed(err) {
			return
		}
	}
}

func isClosed(err error) bool { return err != nil && errors.Is(err, link.ErrClosed) }
