package roce

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/link/xsk"
)

// ProbeAFXDP tests for real whether Open could run AF_XDP on the interface
// with this process's privileges, without disturbing its traffic: no other
// process may hold it (a *HeldError names the holder), the steering program
// must pass the kernel's verifier, and an AF_XDP socket with the UMEM Open
// would use must bind to rx queue 0 in copy mode; everything is released at
// once. The program is not attached: on a real NIC a native attach
// reconfigures the rings and a generic one turns off LRO and hardware GRO
// for good, and with the program loaded by this process nothing else stands
// in the way of an attach but another program, which the holder check finds.
// Call it in the interface's network namespace.
func ProbeAFXDP(ifname string) error {
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	info, err := interfaceInfo(h, ifname)
	if err != nil {
		return err
	}
	if len(info.hw) != 6 {
		return errors.New("not an Ethernet interface")
	}
	if hd := xskHolder(info, false); hd != nil {
		return &HeldError{Holder: *hd}
	}
	p, err := bpf.Load()
	if err != nil {
		return err
	}
	p.Close()
	s, err := xsk.OpenQueue(ifname, 0, &xsk.Config{Bind: xsk.BindCopy})
	if err != nil {
		return err
	}
	return s.Close()
}
