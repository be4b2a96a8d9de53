package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/udp"
)

// Open makes a Device on the network interface ifname: the GID table from its
// addresses, the path MTU from its MTU, and the link chosen by opts.Link
// (LinkAuto: AF_XDP when the process has the capabilities and the interface
// takes the XDP program and sockets, else kernel UDP sockets; LinkName and
// LinkReason say which and why). Call it in the network namespace of the
// interface (sockets and the netlink handle used for neighbour lookups stay
// bound to it). The device follows the interface until it closes: its GID
// table the addresses, its port state the link (up with carrier), with the
// asynchronous events (AsyncEvents).
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
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("roce: open: %w", err)
	}
	var (
		l       link.Link
		reason  string
		cleanup []func() error
	)
	switch o.Link {
	case LinkUDP:
		reason = "UDP requested"
		l, cleanup, err = claimUDP(info, &o)
	case LinkXSK:
		reason = "AF_XDP requested"
		l, cleanup, err = claimXSK(info, &o)
	case LinkAuto:
		if ok, why := Privileged(); !ok {
			reason = "AF_XDP not tried: " + why
		} else {
			l, cleanup, err = claimXSK(info, &o)
			if err == nil {
				reason = "AF_XDP available"
			} else {
				reason = "AF_XDP unavailable: " + err.Error()
			}
		}
		// Never UDP on an interface another process holds: it would not
		// receive.
		if l == nil && !errors.Is(err, ErrHeld) {
			l, cleanup, err = claimUDP(info, &o)
		}
	default:
		err = fmt.Errorf("unknown link kind %v", o.Link)
	}
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	o.Addrs = info.addrs
	if len(info.hw) == 6 {
		o.HWAddr = info.hw
	}
	if o.Resolve == nil && len(l.Props().HWAddr) == 6 {
		r := &neighResolver{h: h, ifindex: info.index, ifname: info.name, hw: info.hw,
			own: map[netip.Addr]bool{}, timeout: o.NeighborTimeout}
		for _, a := range info.addrs {
			r.own[a] = true
		}
		o.Resolve = r.resolve
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
		d.xdpCounters = xdpCounters(info.xdp)
	}
	stop, err := d.watchInterface(info)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	d.cleanup = append(d.cleanup, stop)
	return d, nil
}

// openUDP opens link/udp on all addresses (dual-stack) for the interface's
// MTU.
func openUDP(info *ifaceInfo, o *Options) (link.Link, error) {
	mtu := info.mtu
	if mtu > udp.MaxAutoMTU {
		mtu = udp.MaxAutoMTU
	}
	l, err := udp.Open(udp.Config{Port: o.UDPPort, MTU: mtu})
	if err != nil {
		return nil, err
	}
	return l, nil
}
