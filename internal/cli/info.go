package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/link/xsk"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

var infoCommand = &Command{
	Name:       "info",
	ShortUsage: "xdproce info [--json] [IF...]",
	ShortHelp:  "show interfaces, addresses, GID tables and whether AF_XDP can run",
	LongHelp: `Info lists the network interfaces (or the ones named) with their MTU and the
RoCE path MTU it allows, MAC and IP addresses, receive queue count and
driver, the GID table xdproce builds for each, and whether AF_XDP and native
(driver) XDP are available there, and if not, why.

The GID table follows rxe's order, so that rdma-core's '-g N' means the same
GID: index 0 is the link-local fe80:: address made from the MAC (present even
when IPv6 is off), index 1 the first IPv4 address as ::ffff:a.b.c.d, then the
other addresses.

AF_XDP is tested for real on each Ethernet interface, with this process's
privileges: the steering program is loaded (so the kernel's verifier judges
it) and an AF_XDP socket with the UMEM a device uses is bound to rx queue 0 in
copy mode; both are released at once. The program is not attached, as that
would disturb the interface's traffic (a native attach reconfigures a NIC's
rings, a generic one turns off LRO and hardware GRO for good). When another
process holds the interface (an xdproce, another XDP program, or a socket on
UDP port 4791 there), info names it, its PID, command and program, instead.

"--link auto" says which link a command picks there by default (unless an
xdproce daemon serves the interface) and why: UDP with GSO/GRO on veth and
other virtual devices and on NICs without zero-copy AF_XDP, AF_XDP on a NIC
with zero-copy AF_XDP (and where UDP GSO cannot send, when privileged).

JSON FORMAT
  --json prints {"schema": 1, "privileged": BOOL, "privilege_note": STR,
  "af_xdp_kernel": BOOL, "af_xdp_kernel_note": STR, "interfaces": [{"name",
  "index", "mtu", "path_mtu", "mac", "up", "loopback", "addresses": [CIDR...],
  "gids": [{"index", "gid"}], "queues", "driver", "xdp_attached_prog",
  "daemon": {"pid", "socket", "clients": [{"client", "process",
  "qpn_first", "qpn_last"}], "clients_note"}, "af_xdp": {"available",
  "reason", "holder": {"pid", "command", "holds"}}, "native_xdp":
  {"available", "reason"}, "link_auto": {"link", "reason"}, "device": {...},
  "port": {...}}]} (link_auto: the link --link auto picks there without a
  daemon, "udp" or "xsk", and why; daemon only
  when an xdproce daemon serves the interface: processes there attach to
  it; holder only when another process holds the interface, pid 0 when it
  is not visible to this one). "device" and "port" are what
  a device opened there with the default options reports (roce's
  Device.Query and QueryPort), named as ibv_devinfo -v names them:
  device {"fw_ver", "node_guid", "sys_image_guid", "vendor_id",
  "vendor_part_id", "hw_ver", "max_mr_size", "page_size_cap", "max_qp",
  "max_qp_wr", "max_sge", "max_sge_rd", "max_inline_data", "max_cq",
  "max_cqe", "max_mr", "max_pd", "max_qp_rd_atom", "max_qp_init_rd_atom",
  "max_res_rd_atom", "atomic_cap", "max_srq", "max_srq_wr", "max_srq_sge",
  "max_pkeys", "phys_port_cnt"}, port {"state", "phys_state", "max_mtu",
  "active_mtu" (bytes), "gid_tbl_len", "max_msg_sz", "pkey_tbl_len",
  "link_layer", "active_width", "active_speed", "speed_mbps" (ethtool's;
  0 unknown, which counts as 1X SDR as in rxe)}. Field names are stable
  within schema 1.

EXAMPLES
  xdproce info
  xdproce info eth1
  xdproce info --json | jq '.interfaces[] | {name, gids}'`,
	Setup: setupInfo,
}

// Drivers with native (driver-mode) XDP in mainline Linux, as far as we know;
// other drivers get generic (skb) mode, which works but copies more.
var nativeXDPDrivers = map[string]bool{
	"veth": true, "virtio_net": true, "tun": true, "ixgbe": true, "ixgbevf": true, "i40e": true,
	"ice": true, "igb": true, "igc": true, "mlx4_en": true, "mlx5_core": true, "bnxt_en": true,
	"nfp": true, "qede": true, "ena": true, "gve": true, "hv_netvsc": true, "thunder-nicvf": true,
	"dpaa2-eth": true, "sfc": true, "stmmac": true, "mvneta": true, "mvpp2": true, "fec": true,
	"atlantic": true, "netdevsim": true, "cpsw": true, "enetc": true, "tsnep": true, "lan966x-switch": true,
	"octeontx2-nicpf": true, "bond": true, "xennet": true, "vmxnet3": true, "virtio-net": true,
}

type infoReport struct {
	Schema          int          `json:"schema"`
	Privileged      bool         `json:"privileged"`
	PrivilegeNote   string       `json:"privilege_note,omitempty"`
	AFXDPKernel     bool         `json:"af_xdp_kernel"`
	AFXDPKernelNote string       `json:"af_xdp_kernel_note,omitempty"`
	Interfaces      []*ifaceInfo `json:"interfaces"`
}

type ifaceInfo struct {
	Name       string      `json:"name"`
	Index      int         `json:"index"`
	MTU        int         `json:"mtu"`
	PathMTU    int         `json:"path_mtu"`
	MAC        string      `json:"mac,omitempty"`
	Up         bool        `json:"up"`
	Loopback   bool        `json:"loopback"`
	Addresses  []string    `json:"addresses"`
	GIDs       []gidEntry  `json:"gids"`
	Queues     int         `json:"queues,omitempty"`
	Driver     string      `json:"driver,omitempty"`
	XDPProg    uint32      `json:"xdp_attached_prog,omitempty"`
	Daemon     *daemonInfo `json:"daemon,omitempty"` // the xdproce daemon serving it
	AFXDP      verdict     `json:"af_xdp"`
	NativeXDP  verdict     `json:"native_xdp"`
	LinkAuto   *autoChoice `json:"link_auto,omitempty"` // what --link auto picks without a daemon
	Device     *devAttr    `json:"device,omitempty"`
	Port       *portAttr   `json:"port,omitempty"`
	addrPrefix []netip.Prefix
}

// autoChoice is the link --link auto picks on the interface and why
// (roce.LinkFacts.Choose on the probed facts).
type autoChoice struct {
	Link   string `json:"link"`
	Reason string `json:"reason"`
}

type gidEntry struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
}

type verdict struct {
	Available bool        `json:"available"`
	Reason    string      `json:"reason,omitempty"`
	Holder    *holderInfo `json:"holder,omitempty"`
}

type holderInfo struct {
	PID     int    `json:"pid"`
	Command string `json:"command,omitempty"`
	Holds   string `json:"holds,omitempty"`
}

func setupInfo(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	jsonOut := fs.Bool("json", false, "print JSON (schema 1, see JSON FORMAT)")
	return func(ctx context.Context, args []string) error {
		rep, err := gatherInfo(args)
		if err != nil {
			return err
		}
		if *jsonOut {
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		printInfo(env.Stdout, rep)
		return nil
	}
}

func gatherInfo(names []string) (*infoReport, error) {
	rep := &infoReport{Schema: 1}
	rep.Privileged, rep.PrivilegeNote = capabilities()
	rep.AFXDPKernel, rep.AFXDPKernelNote = probeAFXDPSocket()
	var ifs []net.Interface
	if len(names) == 0 {
		all, err := net.Interfaces()
		if err != nil {
			return nil, fmt.Errorf("list interfaces: %w", err)
		}
		ifs = all
	} else {
		for _, n := range names {
			ifi, err := net.InterfaceByName(n)
			if err != nil {
				return nil, fmt.Errorf("unknown interface %q (see 'ip link')", n)
			}
			ifs = append(ifs, *ifi)
		}
	}
	for _, ifi := range ifs {
		rep.Interfaces = append(rep.Interfaces, describeIface(ifi, rep))
	}
	return rep, nil
}

func describeIface(ifi net.Interface, rep *infoReport) *ifaceInfo {
	in := &ifaceInfo{Name: ifi.Name, Index: ifi.Index, MTU: ifi.MTU, Up: ifi.Flags&net.FlagUp != 0,
		Loopback: ifi.Flags&net.FlagLoopback != 0, Addresses: []string{}}
	in.PathMTU = wire.PathMTU(min(ifi.MTU, 9000)).Bytes()
	if len(ifi.HardwareAddr) > 0 {
		in.MAC = ifi.HardwareAddr.String()
	}
	var addrs []netip.Addr
	if as, err := ifi.Addrs(); err == nil {
		for _, a := range as {
			if ipn, ok := a.(*net.IPNet); ok {
				ip, _ := netip.AddrFromSlice(ipn.IP)
				ones, _ := ipn.Mask.Size()
				ip = ip.Unmap()
				p := netip.PrefixFrom(ip, ones)
				in.addrPrefix = append(in.addrPrefix, p)
				in.Addresses = append(in.Addresses, p.String())
				addrs = append(addrs, ip)
			}
		}
	}
	var mac [6]byte
	copy(mac[:], ifi.HardwareAddr)
	for i, g := range gidTable(mac, addrs) {
		in.GIDs = append(in.GIDs, gidEntry{Index: i, GID: g.String()})
	}
	if da, pa, err := roce.InterfaceAttr(ifi.Name, nil); err == nil {
		in.Device, in.Port = newDevAttr(da), newPortAttr(pa)
	}
	if n, err := xsk.QueueCount(ifi.Name); err == nil {
		in.Queues = n
	}
	if l, err := netlink.LinkByIndex(ifi.Index); err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached {
		in.XDPProg = l.Attrs().Xdp.ProgId
	}
	in.Daemon = describeDaemon(ifi.Index)
	switch {
	case !rep.AFXDPKernel:
		in.AFXDP.Reason = rep.AFXDPKernelNote
	case len(ifi.HardwareAddr) != 6:
		in.AFXDP.Reason = "not an Ethernet interface"
	default:
		in.AFXDP = probeAFXDP(ifi.Name, in.Up, rep)
	}
	if f, err := roce.ProbeLinkFacts(ifi.Name); err == nil {
		in.Driver = f.Driver
		k, why := f.Choose()
		in.LinkAuto = &autoChoice{Link: k.String(), Reason: why}
	}
	switch {
	case in.Loopback || len(ifi.HardwareAddr) != 6:
		in.NativeXDP.Reason = "generic mode only on this kind of interface"
	case in.Driver == "":
		in.NativeXDP.Reason = "driver unknown; xdproce tries native and falls back to generic"
	case nativeXDPDrivers[in.Driver]:
		in.NativeXDP = verdict{Available: true, Reason: "driver " + in.Driver}
	default:
		in.NativeXDP.Reason = "driver " + in.Driver + " has no native XDP as far as xdproce knows; generic mode works"
	}
	return in
}

// gidTable orders GIDs as rxe does: the link-local GID from the MAC, the
// first IPv4 address, then the other addresses, without duplicates.
func gidTable(mac [6]byte, addrs []netip.Addr) []netip.Addr {
	gids := []netip.Addr{roce.LinkLocalGID(mac)}
	seen := map[netip.Addr]bool{gids[0]: true}
	add := func(a netip.Addr) {
		g := roce.GIDFromIP(a.WithZone(""))
		if !seen[g] {
			seen[g] = true
			gids = append(gids, g)
		}
	}
	for _, a := range addrs {
		if a.Is4() {
			add(a)
			break
		}
	}
	for _, a := range addrs {
		add(a)
	}
	return gids
}

// probeAFXDP loads the steering program and binds an AF_XDP socket on the
// interface, released at once (roce.ProbeAFXDP), and says what stands in the
// way: the process holding the interface, missing capabilities, or the
// kernel's refusal.
func probeAFXDP(ifname string, up bool, rep *infoReport) verdict {
	err := roce.ProbeAFXDP(ifname)
	var he *roce.HeldError
	switch {
	case err == nil && !up:
		return verdict{Available: true, Reason: "interface is down"}
	case err == nil:
		return verdict{Available: true}
	case errors.As(err, &he):
		h := he.Holder
		return verdict{Reason: "held by " + h.String(), Holder: &holderInfo{PID: h.PID, Command: h.Command, Holds: h.Holds}}
	case !rep.Privileged:
		return verdict{Reason: rep.PrivilegeNote}
	}
	return verdict{Reason: withPermissionHint(err).Error()}
}

// capabilities reports whether the process has the capabilities AF_XDP
// needs, and if not which it lacks (with the fix).
func capabilities() (bool, string) {
	ok, why := roce.Privileged()
	if !ok {
		if hint := permissionHint(""); hint != "" {
			why = hint
		}
	}
	return ok, why
}

func printInfo(w io.Writer, rep *infoReport) {
	if !rep.Privileged {
		fmt.Fprintf(w, "privileges: AF_XDP unavailable to this process (%s)\n\n", rep.PrivilegeNote)
	}
	for i, in := range rep.Interfaces {
		if i > 0 {
			fmt.Fprintln(w)
		}
		state := "down"
		if in.Up {
			state = "up"
		}
		fmt.Fprintf(w, "%s: index %d, %s, mtu %d (RoCE path MTU %d)", in.Name, in.Index, state, in.MTU, in.PathMTU)
		if in.MAC != "" {
			fmt.Fprintf(w, ", mac %s", in.MAC)
		}
		fmt.Fprintln(w)
		if in.Driver != "" || in.Queues > 0 {
			fmt.Fprintf(w, "  driver %s, %d rx queue(s)\n", orDash(in.Driver), in.Queues)
		}
		if len(in.Addresses) > 0 {
			fmt.Fprintf(w, "  addresses: %s\n", strings.Join(in.Addresses, ", "))
		}
		printDaemon(w, in.Daemon)
		fmt.Fprintf(w, "  AF_XDP: %s\n", yesNo(in.AFXDP))
		fmt.Fprintf(w, "  native XDP: %s\n", yesNo(in.NativeXDP))
		if in.LinkAuto != nil {
			fmt.Fprintf(w, "  --link auto: %s (%s)\n", in.LinkAuto.Link, in.LinkAuto.Reason)
		}
		printAttrs(w, in)
		fmt.Fprintln(w, "  GID table (RoCEv2):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, g := range in.GIDs {
			fmt.Fprintf(tw, "    %d\t%s\n", g.Index, g.GID)
		}
		tw.Flush()
	}
}

func yesNo(v verdict) string {
	s := "no"
	if v.Available {
		s = "yes"
	}
	if v.Reason != "" {
		s += " (" + v.Reason + ")"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
