package roce

import (
	"github.com/xdproce/xdproce/roce/mr"
)

// The device's side of placement on the first hop (docs/placement.md): the
// rkey of a region from PD.AllocMR is registered with the daemon beside
// the region (with its PD's number, access and addresses), and a queue pair
// that may have granted the daemon its WRITEs and READs (roce/qp
// place_grant.go) is revoked when Modify or Destroy changes it, before the
// verb returns. Deregistering the region drops its rkey in the daemon.

// pdNumbers numbers the device's protection domains for the daemon.
type pdNumbers struct {
	n    map[*mr.PD]uint32
	next uint32
}

// PDNumber implements qp.Placer.
func (s *sharedRegions) PDNumber(pd *mr.PD) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.pds.n[pd]; ok {
		return n
	}
	if s.pds.n == nil {
		s.pds.n = map[*mr.PD]uint32{}
	}
	s.pds.next++
	s.pds.n[pd] = s.pds.next
	return s.pds.next
}

// registerKey tells the daemon m's rkey (m is all of shared region id),
// unless its rkey may be invalidated by a peer. The daemon refusing it
// costs only the first hop: the responder then checks each request.
func (s *sharedRegions) registerKey(id uint32, m *mr.MR) {
	if s.placeKey == nil || m.Access()&mr.RemoteInvalidate != 0 || m.Access()&(mr.RemoteWrite|mr.RemoteRead) == 0 {
		return
	}
	if s.placeKey(id, m.RKey(), s.PDNumber(m.PD()), m.Access(), m.Addr(), uint64(m.Len())) != nil {
		s.keyFails.Add(1)
	}
}

// revokeGrant withdraws what the queue pair granted the daemon, after an
// engine round (so the engine saw the change and grants no more under the
// old state).
func (q *QP) revokeGrant() error {
	s := q.d.shared
	if s == nil || s.revoke == nil || !q.q.Placing() {
		return nil
	}
	q.d.sync()
	if !q.q.TakeGranted() {
		return nil
	}
	return s.revoke(q.e.qpn)
}
