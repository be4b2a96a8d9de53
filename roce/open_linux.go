package roce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/udp"
)

// Open makes a Device on the network interface ifname: the GID table from its
// addresses, the path MTU from its MTU, and the link chosen by opts.Link
// (LinkAuto: the xdproce daemon serving the interface when there is one,
// else the link LinkFacts.Choose picks for the interface: UDP with GSO on
// veth and other virtual devices, AF_XDP on a NIC with zero-copy AF_XDP;
// LinkName and LinkReason say which and why). Call it in the network namespace of the
// interface (sockets and the netlink handle used for neighbour lookups stay
// bound to it); with LinkDaemon and a daemon socket path, ifname need not
// exist in this namespace. The device follows the interface until it
// closes: its GID table the addresses, its port state the link (up with
// carrier), with the asynchronous events (AsyncEvents).
func Open(ifname string, opts *Options) (*Device, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.NeighborTimeout <= 0 {
		o.NeighborTimeout = 3 * time.Second
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("roce: open %s: netlink: %w", ifname, err)
	}
	info, err := interfaceInfo(h, ifname)
	if err != nil && o.Link != LinkDaemon {
		h.Close()
		return nil, fmt.Errorf("roce: open: %w", err)
	}
	if err != nil {
		info = nil // a daemon reached by its socket path from another namespace
	}
	if o.Link == LinkDaemon || o.Link == LinkAuto {
		if d, ok, err := openDaemonFor(ifname, info, h, &o); ok {
			if err != nil {
				return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
			}
			return d, nil
		}
	}
	l, cleanup, reason, err := claimLink(info, &o)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	o.Addrs = info.addrs
	if len(info.hw) == 6 {
		o.HWAddr = info.hw
	}
	if o.Resolve == nil && len(l.Props().HWAddr) == 6 {
		o.Resolve = newNeighResolver(h, info, o.NeighborTimeout)
	}
	d, err := newDevice(l, &o, ifname, reason)
	if err != nil {
		l.Close()
		for i := len(cleanup) - 1; i >= 0; i-- {
			_ = cleanup[i]()
		}
		h.Close()
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	d.cleanup = append(cleanup, func() error { h.Close(); return nil })
	if info.xdp != nil {
		d.xdpCounters = xdpCounters(info.xdp, l)
	}
	d.join = newGroupJoiner(info, l)
	stop, err := d.watchInterface(info)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	d.cleanup = append(d.cleanup, stop)
	return d, nil
}

// claimLink opens the link o.Link selects on the interface: AF_XDP, UDP,
// or for LinkAuto the one LinkFacts.Choose picks from the probed facts;
// when that is AF_XDP and it fails for another reason than a holder, UDP,
// saying why (never UDP on an interface another process holds: it would not
// receive). reason says what was chosen and why.
func claimLink(info *ifaceInfo, o *Options) (l link.Link, cleanup []func() error, reason string, err error) {
	switch o.Link {
	case LinkUDP:
		reason = "UDP requested"
		l, cleanup, err = claimUDP(info, o)
	case LinkXSK:
		reason = "AF_XDP requested"
		l, cleanup, err = claimXSK(info, o)
	case LinkAuto:
		var kind LinkKind
		kind, reason = probeFacts(info).Choose()
		if kind == LinkXSK {
			l, cleanup, err = claimXSK(info, o)
			if err != nil && !errors.Is(err, ErrHeld) {
				reason += "; AF_XDP failed (" + err.Error() + "): UDP"
			}
		}
		if l == nil && !errors.Is(err, ErrHeld) {
			l, cleanup, err = claimUDP(info, o)
		}
	default:
		err = fmt.Errorf("unknown link kind %v", o.Link)
	}
	return l, cleanup, reason, err
}

// newNeighResolver looks next hops up through h, in the interface's
// neighbour table.
func newNeighResolver(h *netlink.Handle, info *ifaceInfo, timeout time.Duration) func(netip.Addr) (net.HardwareAddr, error) {
	r := &neighResolver{h: h, ifindex: info.index, ifname: info.name, hw: info.hw,
		own: map[netip.Addr]bool{}, timeout: timeout}
	for _, a := range info.addrs {
		r.own[a] = true
	}
	return r.resolve
}

// openDaemonFor attaches to the daemon for the interface when there is one
// (Options.Daemon, $XDPROCE_DAEMON, the announced one; for LinkDaemon also
// the default socket path). ok is false when LinkAuto found none: Open
// goes on to open the interface itself. It owns h when ok.
func openDaemonFor(ifname string, info *ifaceInfo, h *netlink.Handle, o *Options) (d *Device, ok bool, err error) {
	path, why := daemonSocket(o, info)
	if path == "" && o.Link == LinkAuto {
		return nil, false, nil
	}
	if path == "" {
		if path, err = proto.DefaultSocket(ifname); err != nil {
			h.Close()
			return nil, true, err
		}
		why = "no daemon announced for " + ifname + "; trying the default socket"
	}
	d, err = openDaemon(ifname, path, why, info, h, o)
	return d, true, err
}

// openUDP opens link/udp for the interface's MTU on all its addresses
// (dual-stack) and only its: the socket is bound to the device
// (SO_BINDTODEVICE), so processes on two interfaces of one namespace each
// have port 4791 on theirs.
func openUDP(info *ifaceInfo, o *Options) (link.Link, error) {
	mtu := info.mtu
	if mtu > udp.MaxAutoMTU {
		mtu = udp.MaxAutoMTU
	}
	l, err := udp.Open(udp.Config{Port: o.UDPPort, MTU: mtu, Device: info.name})
	if err != nil {
		return nil, err
	}
	return l, nil
}
