package roce

// LinkFacts are what the LinkAuto rule (Choose) decides from, probed per
// interface by ProbeLinkFacts.
type LinkFacts struct {
	// Ethernet: the interface has a 6-byte hardware address (AF_XDP needs
	// one; loopback and tun in L3 mode have none).
	Ethernet bool
	// Kind is the kernel's link type ("veth", "tuntap", "bridge", ...;
	// "device" for a NIC and loopback); Driver the ethtool driver name.
	Kind, Driver string
	// Virtual: a software device (any Kind but "device"), whose frames
	// never leave the host as such: no NIC segments or checksums them.
	Virtual bool
	// ZeroCopy: the driver reports zero-copy AF_XDP (the netdev family's
	// xdp-features has xsk-zerocopy). ZeroCopyNote says why not when it
	// could not be read.
	ZeroCopy     bool
	ZeroCopyNote string
	// GSO: link/udp's UDP_SEGMENT can send on the interface (the kernel
	// has it, and the device offloads transmit checksums or the kernel
	// checksums GSO segments itself, since Linux 6.11); GSONote says why
	// not.
	GSO     bool
	GSONote string
	// Privileged: the process has the capabilities AF_XDP needs;
	// PrivilegeNote says which it lacks.
	Privileged    bool
	PrivilegeNote string
}

// Choose is the LinkAuto rule: the fastest link the interface and the
// process allow, and why (docs/status.md "--link auto" has the figures).
//   - Not Ethernet: UDP (AF_XDP needs an Ethernet device).
//   - Zero-copy AF_XDP and the privileges for it: AF_XDP, which moves frames
//     without a copy or an skb.
//   - Otherwise, GSO available: UDP. On veth and other virtual devices, and
//     on NICs whose AF_XDP runs in copy mode, the kernel's UDP GSO/GRO moves
//     a batch of frames per skb where copy-mode AF_XDP pays an skb and a
//     copy per frame (on veth: 3× for the raw links, 1.1–1.25× for bench
//     write through the engine, docs/status.md).
//   - No GSO: AF_XDP in copy mode when privileged (one skb per frame either
//     way, and AF_XDP skips the socket layer), else UDP.
//
// Choose never picks AF_XDP where the peer's GSO could reach a generic-mode
// XDP program (docs/status.md, Known gaps): it picks AF_XDP on a virtual
// device only without GSO there, and Open attaches natively where it can.
func (f LinkFacts) Choose() (LinkKind, string) {
	dev := f.Kind
	if f.Driver != "" && f.Driver != f.Kind {
		dev += " (driver " + f.Driver + ")"
	}
	if dev == "" {
		dev = "unknown device"
	}
	switch {
	case !f.Ethernet:
		return LinkUDP, "not an Ethernet interface (AF_XDP needs one): UDP"
	case f.ZeroCopy && f.Privileged:
		return LinkXSK, dev + " has zero-copy AF_XDP: AF_XDP"
	case f.GSO:
		why := dev + " has no zero-copy AF_XDP"
		if f.Virtual {
			why = "virtual device " + dev
		} else if f.ZeroCopyNote != "" {
			why += " (" + f.ZeroCopyNote + ")"
		}
		if f.ZeroCopy { // and not privileged
			why = dev + " has zero-copy AF_XDP but " + f.PrivilegeNote
		}
		return LinkUDP, why + ": UDP with GSO/GRO (a batch of frames per skb; AF_XDP in copy mode pays one per frame)"
	case f.Privileged:
		return LinkXSK, "no UDP GSO on " + dev + " (" + f.GSONote + "): AF_XDP (copy mode skips the socket layer)"
	}
	return LinkUDP, "no UDP GSO on " + dev + " (" + f.GSONote + ") and no AF_XDP (" + f.PrivilegeNote + "): UDP, one datagram per frame"
}
