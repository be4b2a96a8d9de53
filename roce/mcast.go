package roce

import (
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// Multicast delivery (docs/ooo.md, "Broadcast and multicast"). A frame whose
// BTH DestQPN is MulticastQPN names no queue pair: the device hands it to
//   - for an OOO opcode, the one OOO queue pair that defined the group
//     context the frame's XRH names for the frame's destination address
//     (DefineGroupContext);
//   - for a UD SEND, every UD queue pair attached to the frame's
//     destination GID (AttachMcast, as ibv_attach_mcast).
// A frame no queue pair takes is dropped and counted drop_unknown_qpn (a
// non-member holds no context for it).

// MulticastQPN is the destination QPN of multicast and broadcast frames.
const MulticastQPN = 0xFFFFFF

// groupRoutes lists the queue pairs that take multicast frames: a
// copy-on-write slice the engine reads without a lock.
type groupRoutes struct {
	mu   sync.Mutex
	list atomic.Pointer[[]groupRoute]
}

// groupRoute is one queue pair taking multicast frames: an OOO queue pair
// with group contexts (group invalid: it checks the frame itself), or a UD
// queue pair attached to group.
type groupRoute struct {
	e     *qpEntry
	group netip.Addr
}

func (t *groupRoutes) routes() []groupRoute {
	if l := t.list.Load(); l != nil {
		return *l
	}
	return nil
}

// add adds r unless present; it reports whether it did.
func (t *groupRoutes) add(r groupRoute) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.routes()
	if slices.Contains(old, r) {
		return false
	}
	l := append(slices.Clip(old), r)
	t.list.Store(&l)
	return true
}

// remove removes the routes gone selects; it reports whether any went.
func (t *groupRoutes) remove(gone func(groupRoute) bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.routes()
	l := slices.DeleteFunc(slices.Clone(old), gone)
	if len(l) == len(old) {
		return false
	}
	t.list.Store(&l)
	return true
}

// drop removes every route of e (its queue pair is destroyed).
func (t *groupRoutes) drop(e *qpEntry) {
	t.remove(func(r groupRoute) bool { return r.e == e })
}

// multicast delivers a frame sent to MulticastQPN (decoded in p) to the
// queue pairs of its group. Those of other engines get it handed over
// (handoff.go), once per engine, unless it was handed to this one (handed):
// then it goes to this engine's alone.
func (e *engine) multicast(frame []byte, p *wire.Packet, now int64, handed bool) {
	info, _ := p.BTH.Opcode.Info()
	dst := p.DstIP.Unmap()
	taken := false
	var others uint64 // engines to hand the frame to
	for _, r := range e.d.groups.routes() {
		if r.e.dead.Load() {
			continue
		}
		if info.Transport == wire.OOO {
			if r.group.IsValid() || !r.e.q.HasGroupContext(p.XRH.Ctx, dst) {
				continue
			}
			switch {
			case r.e.eng.Load() == e:
				e.deliver(r.e, p, now)
			case !handed:
				if !e.handoff(r.e.eng.Load(), frame) {
					e.handDrops++
				}
			default:
				e.dropUnknownQPN++
			}
			return // a group context belongs to one queue pair
		}
		if r.group == dst && r.e.q.Type() == qp.UD {
			if r.e.eng.Load() != e {
				if !handed {
					others |= 1 << r.e.eng.Load().idx
					taken = true
				}
				continue
			}
			e.deliver(r.e, p, now)
			taken = true
		}
	}
	for ; others != 0; others &= others - 1 {
		if !e.handoff(e.d.engs[bits.TrailingZeros64(others)], frame) {
			e.handDrops++
		}
	}
	if !taken {
		e.dropUnknownQPN++
	}
}

// groupMAC returns the Ethernet address of a multicast group (RFC 1112:
// 01:00:5e and the low 23 bits; RFC 2464: 33:33 and the low 32 bits) or of
// the limited broadcast 255.255.255.255.
func groupMAC(ip netip.Addr) ([6]byte, bool) {
	ip = ip.Unmap()
	switch {
	case ip.Is4() && ip.IsMulticast():
		a := ip.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}, true
	case ip.Is6() && ip.IsMulticast():
		a := ip.As16()
		return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}, true
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true
	}
	return [6]byte{}, false
}

// IsBroadcastOf reports whether a is an IPv4 broadcast address of the
// interface with index ifindex: 255.255.255.255, or the broadcast address
// of one of its IPv4 subnets (of /30 or wider).
func IsBroadcastOf(ifindex int, a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() {
		return false
	}
	if a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return false
	}
	addrs, _ := ifi.Addrs()
	for _, ad := range addrs {
		n, ok := ad.(*net.IPNet)
		if !ok || n.IP.To4() == nil || len(n.Mask) != net.IPv4len {
			continue
		}
		var b [4]byte
		for i, x := range n.IP.To4() {
			b[i] = x | ^n.Mask[i]
		}
		if ones, _ := n.Mask.Size(); ones < 31 && netip.AddrFrom4(b) == a {
			return true
		}
	}
	return false
}

// A GroupRegion binds a group context to this side's memory: Len bytes at
// Addr of a region registered with remote write access (RKey, which stays
// on this device), for frames sent to Group.
type GroupRegion = qp.GroupRegion

// The reserved group context ids.
const (
	GroupCtxFirst = qp.GroupCtxFirst
	GroupCtxLast  = qp.GroupCtxLast
)

// IsGroupCtx reports whether x names a group context.
func IsGroupCtx(x Ctx) bool { return qp.IsGroupCtx(x) }

// DefineGroupContext makes x (an id in GroupCtxFirst..GroupCtxLast, its key
// the group sender's choice) a group context of this OOO queue pair, bound
// to reg: an OOO WRITE naming x, multicast to reg.Group or unicast to this
// queue pair, places at reg.Addr + its RETH.VA (an offset; its rkey is not
// used). On a device, one queue pair defines a given id.
func (q *QP) DefineGroupContext(x Ctx, reg GroupRegion) error {
	for _, r := range q.d.groups.routes() {
		if r.e != q.e && !r.group.IsValid() && r.e.q.HasGroupContext(x, reg.Group) {
			return fmt.Errorf("roce: qp %#x: group context %v is queue pair %#x's", q.e.qpn, x, r.e.qpn)
		}
	}
	if err := q.q.DefineGroupContext(x, reg); err != nil {
		return fmt.Errorf("roce: qp %#x: %w", q.e.qpn, err)
	}
	q.d.groups.add(groupRoute{e: q.e})
	return nil
}

// RemoveGroupContext undefines x: packets naming it are dropped from then on.
func (q *QP) RemoveGroupContext(x Ctx) error {
	if err := q.q.RemoveGroupContext(x); err != nil {
		return fmt.Errorf("roce: qp %#x: %w", q.e.qpn, err)
	}
	return nil
}

// AttachMcast attaches this UD queue pair to the multicast group gid (as
// ibv_attach_mcast): UD SENDs to MulticastQPN at that destination reach it
// (and every other queue pair attached). The frames must reach the device:
// join the group on the interface (JoinGroup) so the NIC and the XDP
// program take them.
func (q *QP) AttachMcast(gid netip.Addr) error {
	ip := IPFromGID(gid)
	if q.typ != qp.UD {
		return fmt.Errorf("roce: attach mcast: qp %#x is %v, not UD", q.e.qpn, q.typ)
	}
	if _, ok := groupMAC(ip); !ok {
		return fmt.Errorf("roce: attach mcast: %v is not a multicast group", gid)
	}
	if !q.d.groups.add(groupRoute{e: q.e, group: ip}) {
		return fmt.Errorf("roce: attach mcast: qp %#x is attached to %v already", q.e.qpn, gid)
	}
	return nil
}

// DetachMcast undoes AttachMcast.
func (q *QP) DetachMcast(gid netip.Addr) error {
	ip := IPFromGID(gid)
	if !q.d.groups.remove(func(r groupRoute) bool { return r.e == q.e && r.group == ip }) {
		return fmt.Errorf("roce: detach mcast: qp %#x is not attached to %v", q.e.qpn, gid)
	}
	return nil
}

// groupJoiner joins multicast groups on a device's interface.
type groupJoiner interface {
	join(group netip.Addr) (leave func() error, err error)
	// broadcast reports whether a is an IPv4 broadcast address of the
	// interface: 255.255.255.255 or a subnet's.
	broadcast(a netip.Addr) bool
}

// JoinGroup makes the device's interface a member of the multicast group
// (an IPv4 or IPv6 multicast address): the interface then accepts the
// group's MAC, and the group's RoCE frames reach the device (on AF_XDP the
// steering program redirects frames to a joined group as to one of the
// interface's addresses; link/udp's socket joins it). group may also be an
// IPv4 broadcast address of the interface (255.255.255.255 or its subnet's):
// there is nothing to join, the steering program takes its RoCE frames.
// Call leave to undo. Frames reaching the device go to the queue pairs that
// defined group contexts for the address or attached to it (AttachMcast).
// On a device attached to the xdproce daemon, the daemon joins the group on
// its interface for the first of its clients and fans the group's frames
// out to every client that joined.
func (d *Device) JoinGroup(group netip.Addr) (leave func() error, err error) {
	group = IPFromGID(group)
	if d.join == nil {
		return nil, fmt.Errorf("roce: join group %v: the %s link cannot join groups", group, d.LinkName())
	}
	if !group.IsMulticast() && !d.join.broadcast(group) {
		return nil, fmt.Errorf("roce: join group %v: neither a multicast address nor a broadcast address of the interface", group)
	}
	leave, err = d.join.join(group)
	if err != nil {
		return nil, fmt.Errorf("roce: join group %v: %w", group, err)
	}
	return leave, nil
}
