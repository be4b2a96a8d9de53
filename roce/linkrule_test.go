package roce

import (
	"strings"
	"testing"
)

// TestLinkAutoRule: the LinkAuto rule on faked probes, one row per case the
// rule tells apart: the link chosen and the facts its reason names.
func TestLinkAutoRule(t *testing.T) {
	veth := LinkFacts{Ethernet: true, Kind: "veth", Driver: "veth", Virtual: true, GSO: true, Privileged: true}
	nicZC := LinkFacts{Ethernet: true, Kind: "device", Driver: "ice", ZeroCopy: true, GSO: true, Privileged: true}
	nicCopy := LinkFacts{Ethernet: true, Kind: "device", Driver: "r8169", GSO: true, Privileged: true}
	with := func(f LinkFacts, change func(*LinkFacts)) LinkFacts { change(&f); return f }
	for _, c := range []struct {
		name  string
		facts LinkFacts
		want  LinkKind
		says  []string
	}{
		{"veth", veth, LinkUDP, []string{"virtual device veth", "UDP with GSO/GRO"}},
		{"veth unprivileged", with(veth, func(f *LinkFacts) { f.Privileged, f.PrivilegeNote = false, "missing CAP_BPF" }),
			LinkUDP, []string{"virtual device veth", "UDP with GSO/GRO"}},
		{"tap", with(veth, func(f *LinkFacts) { f.Kind, f.Driver = "tuntap", "tun" }), LinkUDP,
			[]string{"virtual device tuntap (driver tun)", "UDP with GSO/GRO"}},
		{"veth without GSO", with(veth, func(f *LinkFacts) {
			f.GSO, f.GSONote = false, "transmit checksum offload off, which Linux before 6.11 needs for GSO"
		}), LinkXSK, []string{"no UDP GSO on veth (transmit checksum offload off", "AF_XDP"}},
		{"veth without GSO, unprivileged", with(veth, func(f *LinkFacts) {
			f.GSO, f.GSONote, f.Privileged, f.PrivilegeNote = false, "the kernel refuses UDP_SEGMENT: EINVAL", false, "missing CAP_NET_ADMIN"
		}), LinkUDP, []string{"no UDP GSO on veth (the kernel refuses UDP_SEGMENT", "no AF_XDP (missing CAP_NET_ADMIN)", "one datagram per frame"}},
		{"NIC with zero-copy", nicZC, LinkXSK, []string{"device (driver ice) has zero-copy AF_XDP: AF_XDP"}},
		{"NIC with zero-copy, no GSO", with(nicZC, func(f *LinkFacts) { f.GSO = false }), LinkXSK, []string{"zero-copy AF_XDP: AF_XDP"}},
		{"NIC with zero-copy, unprivileged", with(nicZC, func(f *LinkFacts) { f.Privileged, f.PrivilegeNote = false, "missing CAP_BPF" }),
			LinkUDP, []string{"has zero-copy AF_XDP but missing CAP_BPF", "UDP with GSO/GRO"}},
		{"NIC in copy mode", nicCopy, LinkUDP, []string{"device (driver r8169) has no zero-copy AF_XDP", "UDP with GSO/GRO"}},
		{"NIC, old kernel", with(nicCopy, func(f *LinkFacts) { f.ZeroCopyNote = "the kernel does not report XDP features (Linux 6.3 does)" }),
			LinkUDP, []string{"no zero-copy AF_XDP (the kernel does not report XDP features", "UDP"}},
		{"NIC in copy mode, no GSO", with(nicCopy, func(f *LinkFacts) { f.GSO, f.GSONote = false, "x" }), LinkXSK, []string{"no UDP GSO", "AF_XDP"}},
		{"loopback", LinkFacts{Kind: "device", GSO: true, Privileged: true, ZeroCopy: true}, LinkUDP, []string{"not an Ethernet interface"}},
	} {
		got, why := c.facts.Choose()
		if got != c.want {
			t.Errorf("%s: chose %v (%s), want %v", c.name, got, why, c.want)
		}
		for _, s := range c.says {
			if !strings.Contains(why, s) {
				t.Errorf("%s: reason %q does not say %q", c.name, why, s)
			}
		}
		if name := map[LinkKind]string{LinkXSK: ": AF_XDP", LinkUDP: ": UDP"}[got]; strings.Contains(why, "\n") || !strings.Contains(why, name) {
			t.Errorf("%s: reason %q does not say the choice (%q) on one line", c.name, why, name)
		}
	}
}
