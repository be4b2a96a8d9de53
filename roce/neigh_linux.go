package roce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/bpf"
)

// ifaceInfo is what Open learns about an interface through netlink, and the
// steering program openXSK attached to it.
type ifaceInfo struct {
	name  string
	kind  string // the kernel's link type: "veth", "device" (a NIC, loopback), ...
	index int
	mtu   int
	hw    net.HardwareAddr
	addrs []netip.Addr // in the kernel's order: IPv4 first, then IPv6
	up    bool         // up with carrier (linkUp)
	xdp   *bpf.Program // the steering program openXSK attached (nil: none)
}

// interfaceInfo reads the interface's index, MTU, MAC and addresses.
func interfaceInfo(h *netlink.Handle, ifname string) (*ifaceInfo, error) {
	l, err := h.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", ifname, err)
	}
	a := l.Attrs()
	info := &ifaceInfo{name: a.Name, kind: l.Type(), index: a.Index, mtu: a.MTU, hw: a.HardwareAddr, up: linkUp(a)}
	if info.addrs, err = linkAddrs(h, l); err != nil {
		return nil, fmt.Errorf("interface %q: %w", ifname, err)
	}
	return info, nil
}

// linkAddrs lists the interface's addresses: IPv4 first, then IPv6, each in
// the kernel's order.
func linkAddrs(h *netlink.Handle, l netlink.Link) ([]netip.Addr, error) {
	var addrs []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		as, err := h.AddrList(l, fam)
		if err != nil {
			return nil, fmt.Errorf("list addresses: %w", err)
		}
		for _, ad := range as {
			if ad.IPNet == nil {
				continue
			}
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if fam == netlink.FAMILY_V4 != ip.Is4() {
				continue
			}
			addrs = append(addrs, ip)
		}
	}
	return addrs, nil
}

// neighResolver finds next-hop MAC addresses in the kernel's neighbour table,
// through a netlink handle opened in the device's network namespace.
type neighResolver struct {
	h       *netlink.Handle
	ifindex int
	ifname  string
	hw      net.HardwareAddr
	own     map[netip.Addr]bool
	timeout time.Duration
}

// usable neighbour states: the kernel has a MAC it would send to.
const nudUsable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE |
	netlink.NUD_PERMANENT | netlink.NUD_NOARP

// errNoNeighbor is wrapped when resolution times out.
var errNoNeighbor = errors.New("no neighbour entry")

// resolve returns the MAC address to put in frames for dst: the MAC of dst
// itself on the link, or of the gateway the kernel routes dst through. When
// the kernel has no usable entry it asks it to resolve one (RTM_NEWNEIGH with
// NTF_USE, which makes the kernel send ARP or a neighbour solicitation as if a
// packet were waiting) and polls the table until the entry is usable or the
// timeout passes.
func (r *neighResolver) resolve(dst netip.Addr) (net.HardwareAddr, error) {
	dst = dst.Unmap()
	if r.own[dst] {
		return r.hw, nil
	}
	nh := dst
	routes, err := r.h.RouteGet(dst.AsSlice())
	if err != nil && !dst.IsLinkLocalUnicast() {
		return nil, fmt.Errorf("route to %v: %w", dst, err)
	}
	if err == nil && len(routes) > 0 {
		rt := routes[0]
		if rt.LinkIndex != 0 && rt.LinkIndex != r.ifindex {
			return nil, fmt.Errorf("route to %v leaves through interface index %d, not %s (index %d)", dst, rt.LinkIndex, r.ifname, r.ifindex)
		}
		if gw, ok := netip.AddrFromSlice(rt.Gw); ok && rt.Gw != nil && !gw.IsUnspecified() {
			nh = gw.Unmap()
		}
	}
	fam := netlink.FAMILY_V4
	if nh.Is6() {
		fam = netlink.FAMILY_V6
	}
	deadline := time.Now().Add(r.timeout)
	nextKick := time.Time{}
	sleep := time.Millisecond
	state := -1
	for {
		neighs, err := r.h.NeighList(r.ifindex, fam)
		if err != nil {
			return nil, fmt.Errorf("neighbour table of %s: %w", r.ifname, err)
		}
		for _, n := range neighs {
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok || ip.Unmap() != nh {
				continue
			}
			state = n.State
			if n.State&nudUsable != 0 && len(n.HardwareAddr) == 6 {
				return n.HardwareAddr, nil
			}
		}
		now := time.Now()
		if now.After(deadline) {
			return nil, fmt.Errorf("%w for %v on %s after %v (state %s)", errNoNeighbor, nh, r.ifname, r.timeout, nudName(state))
		}
		if now.After(nextKick) {
			r.kick(nh, fam)
			nextKick = now.Add(time.Second)
		}
		time.Sleep(sleep)
		if sleep < 50*time.Millisecond {
			sleep *= 2
		}
	}
}

// kick asks the kernel to resolve nh (RTM_NEWNEIGH with NTF_USE creates the
// entry if needed and starts resolution). Errors are ignored: the poll in
// resolve reports the outcome.
func (r *neighResolver) kick(nh netip.Addr, fam int) {
	_ = r.h.NeighSet(&netlink.Neigh{
		LinkIndex: r.ifindex,
		Family:    fam,
		State:     netlink.NUD_NONE,
		Flags:     netlink.NTF_USE,
		IP:        nh.AsSlice(),
	})
}

func nudName(s int) string {
	switch s {
	case -1:
		return "absent"
	case netlink.NUD_NONE:
		return "none"
	case netlink.NUD_INCOMPLETE:
		return "incomplete"
	case netlink.NUD_FAILED:
		return "failed"
	}
	return fmt.Sprintf("%#x", s)
}
