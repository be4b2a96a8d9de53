package daemon

// Multicast through the daemon (issues 12 and 17). A client's JoinGroup
// asks the daemon (proto.OpJoin), which joins the group on the interface
// for the first member (the uplink's JoinGroup: the membership and the
// steering program's address map, or link/udp's socket) and leaves it with
// the last. A frame to MulticastQPN (0xFFFFFF) whose destination is a
// joined group goes to every member: from the wire, and from a member,
// whose frame also goes to the wire, to the others (as IP multicast loops
// back to local members). Each client's engine then hands it to its own
// queue pairs attached to the group.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// maxGroups bounds the groups one client may join.
const maxGroups = 64

// groups are the groups joined on the interface and their members.
type groups struct {
	join func(netip.Addr) (leave func() error, err error) // the uplink's JoinGroup
	isBC func(netip.Addr) bool                            // an IPv4 broadcast address of the interface

	mu     sync.Mutex
	joined map[[16]byte]*group
	view   atomic.Pointer[map[[16]byte][]*client] // members by group, read by the steering without a lock
}

type group struct {
	leave   func() error
	members []*client
}

// parseGroup reads a group address as a client names it.
func (d *Daemon) parseGroup(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, err
	}
	a = a.Unmap()
	if !a.IsMulticast() && (d.grp.isBC == nil || !d.grp.isBC(a)) {
		return a, fmt.Errorf("%v is neither a multicast address nor a broadcast address of %s", a, d.up.Name)
	}
	return a, nil
}

// joinGroup makes c a member of the group named s.
func (d *Daemon) joinGroup(c *client, s string) error {
	a, err := d.parseGroup(s)
	if err != nil {
		return err
	}
	g := &d.grp
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.joined == nil {
		g.joined = map[[16]byte]*group{}
	}
	k := a.As16()
	e := g.joined[k]
	switch {
	case e != nil && slices.Contains(e.members, c):
		return fmt.Errorf("joined %v already", a)
	case c.groups >= maxGroups:
		return fmt.Errorf("a client joins at most %d groups", maxGroups)
	case e == nil:
		if g.join == nil {
			return errors.New("the daemon's link cannot join groups")
		}
		leave, err := g.join(a)
		if err != nil {
			return err
		}
		e = &group{leave: leave}
		g.joined[k] = e
		d.log.Info("group joined", "group", a, "client", c.id)
	}
	e.members = append(e.members, c)
	c.groups++
	g.publish()
	return nil
}

// leaveGroup ends c's membership of the group named s.
func (d *Daemon) leaveGroup(c *client, s string) error {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return err
	}
	g := &d.grp
	g.mu.Lock()
	defer g.mu.Unlock()
	if !d.leaveLocked(c, a.Unmap().As16()) {
		return fmt.Errorf("not a member of %v", a)
	}
	g.publish()
	return nil
}

// dropGroups ends every membership of c (it detached).
func (d *Daemon) dropGroups(c *client) {
	g := &d.grp
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.joined {
		d.leaveLocked(c, k)
	}
	g.publish()
}

// leaveLocked removes c from group k, leaving it on the interface when c was
// the last member; it reports whether c was one. d.grp.mu is held.
func (d *Daemon) leaveLocked(c *client, k [16]byte) bool {
	g := &d.grp
	e := g.joined[k]
	if e == nil || !slices.Contains(e.members, c) {
		return false
	}
	e.members = slices.DeleteFunc(slices.Clone(e.members), func(m *client) bool { return m == c })
	c.groups--
	if len(e.members) == 0 {
		delete(g.joined, k)
		if err := e.leave(); err != nil {
			d.log.Warn("group left", "group", netip.AddrFrom16(k).Unmap(), "err", err)
		}
	}
	return true
}

// publish makes the members' view for the steering; g.mu is held.
func (g *groups) publish() {
	v := make(map[[16]byte][]*client, len(g.joined))
	for k, e := range g.joined {
		v[k] = slices.Clone(e.members)
	}
	g.view.Store(&v)
}

// members are the clients joined to group dst (nil: none).
func (g *groups) members(dst *[16]byte) []*client {
	if v := g.view.Load(); v != nil {
		return (*v)[*dst]
	}
	return nil
}

// fanOut delivers a multicast frame (its header replaced by hdr when not
// nil) to every member of its destination group but from (the member that
// sent it, nil from the wire); it reports whether any took it.
func (d *Daemon) fanOut(h *header, frame, hdr []byte, from *client) bool {
	took := false
	for _, m := range d.grp.members(&h.dst) {
		if m != from {
			m.deliver(frame, hdr)
			d.st.groupFrames.Add(1)
			took = true
		}
	}
	return took
}
