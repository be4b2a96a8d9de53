package roce

import (
	"errors"
	"net/netip"
)

// The device's side of connection registration (internal/daemon
// conn_linux.go): on a client of the xdproce daemon an RC or UC queue pair
// entering RTR tells the daemon its peer (GID and QPN) before the engine
// sees the transition, so before the verb returns and before any frame of
// the connection can be taken; the daemon then passes another local
// client's RC/UC frames to it only from that peer. Reset and Destroy make
// the daemon forget it. A queue pair the engine fails (Error) keeps its
// registration until then: its frames are the engine's to drop.

// connRegistrar is told the peers of the device's connected queue pairs:
// the xdproce daemon (roce/daemon_linux.go).
type connRegistrar interface {
	connectQP(qpn uint32, peer netip.Addr, peerQPN uint32) error
	disconnectQP(qpn uint32) error
}

// connects reports whether Modify(attr, mask) takes the queue pair from
// INIT to RTR with its peer, which the daemon must know first.
func (q *QP) connects(attr *Attr, mask AttrMask) bool {
	const need = AttrState | AttrAV | AttrDestQPN
	return q.d.conns != nil && (q.typ == RC || q.typ == UC) && mask&need == need && attr.State == StateRTR &&
		q.q.State() == StateInit
}

// registerConn tells the daemon the peer Modify(attr, mask) connects the
// queue pair to (connects is true).
func (q *QP) registerConn(attr *Attr) error {
	return q.d.conns.connectQP(q.e.qpn, attr.AV.DstIP, attr.DestQPN)
}

// unregisterConn makes the daemon forget the queue pair's peer.
func (q *QP) unregisterConn() error {
	if q.d.conns == nil || (q.typ != RC && q.typ != UC) {
		return nil
	}
	return q.d.conns.disconnectQP(q.e.qpn)
}

// modifyConn is modify's registration around the engine's transition
// (apply): registered before a connecting one, withdrawn when it fails,
// and forgotten after a Reset.
func (q *QP) modifyConn(attr *Attr, mask AttrMask, apply func() error) error {
	if q.connects(attr, mask) {
		if err := q.registerConn(attr); err != nil {
			return err
		}
		if err := apply(); err != nil {
			return errors.Join(err, q.unregisterConn())
		}
		return nil
	}
	if err := apply(); err != nil {
		return err
	}
	if mask&AttrState != 0 && attr.State == StateReset {
		return q.unregisterConn()
	}
	return nil
}
