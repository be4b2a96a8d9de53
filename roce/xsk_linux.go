package roce

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/xsk"
)

// openXSK opens an AF_XDP socket on every rx queue of the interface (or the
// first o.Queues) and attaches the steering program, which redirects UDP/4791
// frames for the interface's addresses (and the link-local GID) to them; the
// sockets become one link (xsk.Device.Link: a MultiQueue when there are
// several).
// Frames arriving on a queue without a socket go to the kernel and are lost
// to RoCE, so limiting Queues only makes sense on single-queue setups.
func openXSK(info *ifaceInfo, o *Options) (link.Link, []func() error, error) {
	if len(info.hw) != 6 {
		return nil, nil, fmt.Errorf("AF_XDP: interface %s has no Ethernet address", info.name)
	}
	var cfg xsk.Config
	if o.Queues > 0 {
		n, err := xsk.QueueCount(info.name)
		if err != nil {
			return nil, nil, err
		}
		for q := 0; q < min(n, o.Queues); q++ {
			cfg.Queues = append(cfg.Queues, q)
		}
	}
	dev, err := xsk.Open(info.name, &cfg)
	if err != nil {
		return nil, nil, err
	}
	ips := append([]netip.Addr(nil), info.addrs...)
	ips = append(ips, LinkLocalGID([6]byte(info.hw)))
	var bo bpf.Options
	switch o.XDPMode {
	case "", "auto":
	case "native":
		bo.Mode = bpf.ModeNative
	case "generic":
		bo.Mode = bpf.ModeGeneric
	default:
		dev.Close()
		return nil, nil, fmt.Errorf("AF_XDP: unknown XDP mode %q (want native or generic)", o.XDPMode)
	}
	prog, err := bpf.Attach(info.name, ips, dev.FDs(), &bo)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	dev.SetXDPMode(prog.Mode().String())
	l, err := dev.Link()
	if err != nil {
		prog.Close()
		dev.Close()
		return nil, nil, err
	}
	info.xdp = prog
	return l, []func() error{prog.Close}, nil
}
