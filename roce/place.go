package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/qp"
)

// Direct placement through the xdproce daemon (docs/placement.md): a
// device attached to a daemon allocates memory regions (PD.AllocMR) from
// memfds it shares with the daemon, and its RC queue pairs whose peer is
// another client of the same daemon (the peer's GID is one of this
// device's: the daemon's addresses) move whole messages by placement
// requests instead of frames (roce/qp place.go). This file is the
// device's side: the registry of shared regions (qp.Placer) and the
// engine's dispatch of placement messages to queue pairs.

// MaxAllocMR bounds PD.AllocMR's size (a message's largest length).
const MaxAllocMR = 1 << 31

// PlaceStats count a device's direct placements (sums over its live queue
// pairs, and its shared regions).
type PlaceStats struct {
	Regions        int    // memory regions shared with the daemon
	SharedBytes    int64  // their bytes
	AllocFallbacks uint64 // AllocMR calls that got ordinary memory on a daemon client (the daemon refused)
	qp.PlaceStats
}

// sharedRegions is a daemon client's registry of shared regions: Region
// finds one by address without a lock (a copy-on-write list).
type sharedRegions struct {
	list           atomic.Pointer[[]sharedRegion]
	mu             sync.Mutex // serializes writers
	allocFallbacks atomic.Uint64
	share          func(size int) (buf []byte, id uint32, release func() error, err error)
	sync           func() // waits for an engine round (before memory is unmapped)
	// placeKey registers an rkey with the daemon (region, rkey, PD
	// number, access, address, length); revoke withdraws a queue pair's
	// grant (place_grant.go). Nil: not offered.
	placeKey func(region, rkey, pd uint32, access mr.Access, va, n uint64) error
	revoke   func(qpn uint32) error
	keyFails atomic.Uint64
	pds      pdNumbers // guarded by mu
}

type sharedRegion struct {
	base, end uintptr
	id        uint32
}

var _ qp.Placer = (*sharedRegions)(nil)

// Region implements qp.Placer.
func (s *sharedRegions) Region(b []byte) (uint32, uint64, bool) {
	l := s.list.Load()
	if l == nil || len(b) == 0 {
		return 0, 0, false
	}
	a := uintptr(unsafe.Pointer(&b[0]))
	for _, r := range *l {
		if a >= r.base && a < r.end && uintptr(len(b)) <= r.end-a {
			return r.id, uint64(a - r.base), true
		}
	}
	return 0, 0, false
}

func (s *sharedRegions) add(buf []byte, id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l []sharedRegion
	if old := s.list.Load(); old != nil {
		l = append(l, *old...)
	}
	base := uintptr(unsafe.Pointer(&buf[0]))
	l = append(l, sharedRegion{base: base, end: base + uintptr(len(buf)), id: id})
	s.list.Store(&l)
}

func (s *sharedRegions) remove(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.list.Load()
	if old == nil {
		return
	}
	l := make([]sharedRegion, 0, len(*old))
	for _, r := range *old {
		if r.id != id {
			l = append(l, r)
		}
	}
	s.list.Store(&l)
}

func (s *sharedRegions) stats() (n int, bytes int64) {
	if l := s.list.Load(); l != nil {
		for _, r := range *l {
			n++
			bytes += int64(r.end - r.base)
		}
	}
	return n, bytes
}

// AllocMR allocates size bytes and registers them with access, as RegMR
// does. On a device attached to an xdproce daemon the memory is a sealed
// memfd shared with the daemon, which can then place messages of the
// device's RC queue pairs straight into it and out of it (direct
// placement: no frame, no ICRC); elsewhere, or when the daemon refuses it
// (its limit on shared memory; PlaceStats.AllocFallbacks), it is ordinary
// memory. The region's memory is MR.Bytes; Deregister frees it, after
// which Bytes must not be used.
func (p *PD) AllocMR(size int, access Access) (*MR, error) {
	if size <= 0 || size > MaxAllocMR {
		return nil, fmt.Errorf("roce: alloc mr: size %d not in 1..%d", size, MaxAllocMR)
	}
	if s := p.d.shared; s != nil {
		buf, id, release, err := s.share(size)
		if err == nil {
			s.add(buf, id)
			rel := func() error { s.remove(id); s.sync(); return release() }
			m, err := p.pd.RegisterOwned(buf, access, rel)
			if err != nil {
				return nil, errors.Join(fmt.Errorf("roce: alloc mr: %w", err), rel())
			}
			s.registerKey(id, m) // place_grant.go
			return m, nil
		}
		s.allocFallbacks.Add(1)
	}
	m, err := p.pd.Register(make([]byte, size), access)
	if err != nil {
		return nil, fmt.Errorf("roce: alloc mr: %w", err)
	}
	return m, nil
}

// PlaceStats returns the device's placement counters.
func (d *Device) PlaceStats() PlaceStats {
	var st PlaceStats
	if d.shared == nil {
		return st
	}
	st.Regions, st.SharedBytes = d.shared.stats()
	st.AllocFallbacks = d.shared.allocFallbacks.Load()
	d.mu.Lock()
	for _, e := range d.qps {
		c := e.q.PlaceStats()
		st.Requests += c.Requests
		st.Answers += c.Answers
		st.Fallbacks += c.Fallbacks
		st.Dropped += c.Dropped
		st.Granted += c.Granted
	}
	d.mu.Unlock()
	return st
}

// placerFor is the placer for an RC queue pair whose peer is dgid: the
// device's when the peer is a client of the same daemon, else nil.
func (d *Device) placerFor(dgid netip.Addr) qp.Placer {
	if d.shared == nil {
		return nil
	}
	for _, g := range d.gidTable() {
		if g.Unmap() == dgid.Unmap() {
			return d.shared
		}
	}
	return nil
}

// PlacesWith reports whether RC queue pairs of d towards peer (a GID)
// move their messages by direct placement: d is a client of a daemon and
// peer one of its addresses (another client of the same daemon). Queue
// pairs with selective repeat send frames instead (roce/qp's reqPlace).
func (d *Device) PlacesWith(peer netip.Addr) bool { return d.placerFor(peer) != nil }

// placeInput hands a placement message from the daemon to its queue pair.
func (e *engine) placeInput(frame []byte, now int64) {
	m := &e.d.placeMsg
	if place.Decode(frame, m) != nil {
		e.dropMalformed++
		return
	}
	qpn := m.DstQPN
	if m.Kind == place.KindAck {
		qpn = m.SrcQPN
	}
	q := e.d.lookup(qpn)
	if q == nil || q.dead.Load() {
		e.dropUnknownQPN++
		return
	}
	e.delivered++
	e.schedule(q)
	switch m.Kind {
	case place.KindInd:
		q.q.PlaceInd(m, now, &e.tx)
	case place.KindAck:
		q.q.PlaceAck(m, now, &e.tx)
	case place.KindDone:
		q.q.PlaceDone(m)
	case place.KindNote:
		q.q.PlaceNote(m, now, &e.tx)
	default:
		e.dropMalformed++
		return
	}
	if !q.commEst || q.q.Resets() != q.resets {
		e.qpEvents(q, true)
	}
}
