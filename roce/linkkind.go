package roce

import "fmt"

// LinkKind selects the link Open puts under a Device.
type LinkKind int

const (
	// LinkAuto attaches to the xdproce daemon serving the interface when
	// there is one, else uses the fastest link the interface and the
	// process allow (LinkFacts.Choose): kernel UDP sockets with GSO/GRO on
	// veth and other virtual devices and on NICs without zero-copy AF_XDP,
	// AF_XDP on a NIC with zero-copy AF_XDP.
	LinkAuto LinkKind = iota
	// LinkXSK requires AF_XDP (link/xsk with the XDP steering program).
	LinkXSK
	// LinkUDP uses kernel UDP sockets on port 4791 (link/udp), bound to the
	// interface; no privileges.
	LinkUDP
	// LinkDaemon attaches to the xdproce daemon serving the interface
	// (Options.Daemon, else $XDPROCE_DAEMON, else the daemon announced for
	// the interface): frames go through a shared-memory port (link/shm) to
	// the daemon, which owns the interface. No privileges.
	LinkDaemon
)

// EnvDaemon names the environment variable holding the daemon's socket
// path (the default of Options.Daemon).
const EnvDaemon = "XDPROCE_DAEMON"

func (k LinkKind) String() string {
	switch k {
	case LinkAuto:
		return "auto"
	case LinkXSK:
		return "xsk"
	case LinkUDP:
		return "udp"
	case LinkDaemon:
		return "daemon"
	}
	return fmt.Sprintf("LinkKind(%d)", int(k))
}

// ParseLinkKind parses "auto", "xsk" (or "af_xdp"), "udp" and "daemon".
func ParseLinkKind(s string) (LinkKind, error) {
	switch s {
	case "auto", "":
		return LinkAuto, nil
	case "xsk", "af_xdp", "afxdp", "xdp":
		return LinkXSK, nil
	case "udp":
		return LinkUDP, nil
	case "daemon":
		return LinkDaemon, nil
	}
	return 0, fmt.Errorf("roce: unknown link kind %q (want auto, xsk, udp or daemon)", s)
}
