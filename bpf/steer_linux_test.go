package bpf

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/testenv"
)

var (
	local4  = netip.MustParseAddr("198.51.100.2")
	local6  = netip.MustParseAddr("2001:db8::2")
	remote4 = netip.MustParseAddr("198.51.100.1")
	remote6 = netip.MustParseAddr("2001:db8::1")
	macA    = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macB    = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// bthPayload is a RoCE BTH (RC SEND ONLY to QPN 0x11, PSN 1) plus 4 bytes of
// payload and a dummy ICRC; the program only looks at the UDP port.
var bthPayload = []byte{0x04, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x01,
	'd', 'a', 't', 'a', 0xde, 0xad, 0xbe, 0xef}

// frame serialises layers into an Ethernet frame. vlan adds an 802.1Q tag.
func frame(t testing.TB, vlan bool, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	var etype layers.EthernetType
	switch l := ls[0].(type) {
	case *layers.IPv4:
		etype = layers.EthernetTypeIPv4
	case *layers.IPv6:
		etype = layers.EthernetTypeIPv6
	case *layers.ARP:
		etype = layers.EthernetTypeARP
	default:
		t.Fatalf("frame: first layer %T", l)
	}
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: etype}
	all := []gopacket.SerializableLayer{eth}
	if vlan {
		eth.EthernetType = layers.EthernetTypeDot1Q
		all = append(all, &layers.Dot1Q{VLANIdentifier: 42, Type: etype})
	}
	all = append(all, ls...)
	for _, l := range ls {
		if tl, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok {
			tl.SetNetworkLayerForChecksum(ls[0].(gopacket.NetworkLayer))
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, all...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func ip4(src, dst netip.Addr, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, Flags: layers.IPv4DontFragment,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
}

func ip6(src, dst netip.Addr, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
}

func udp(sport, dport uint16) *layers.UDP {
	return &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
}

type steerCase struct {
	name  string
	frame []byte
	want  Verdict
}

func steerCases(t testing.TB) []steerCase {
	roce4 := frame(t, false, ip4(remote4, local4, layers.IPProtocolUDP), udp(49441, 4791), gopacket.Payload(bthPayload))
	withOpts := ip4(remote4, local4, layers.IPProtocolUDP)
	withOpts.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}} // NOP NOP NOP EOL: IHL 6
	roce4Opts := frame(t, false, withOpts, udp(49441, 4791), gopacket.Payload(bthPayload))
	if roce4Opts[14]&0x0f != 6 {
		t.Fatalf("IPv4 options frame has IHL %d", roce4Opts[14]&0x0f)
	}
	frag := ip4(remote4, local4, layers.IPProtocolUDP)
	frag.Flags = layers.IPv4MoreFragments
	lastFrag := ip4(remote4, local4, layers.IPProtocolUDP)
	lastFrag.Flags, lastFrag.FragOffset = 0, 185
	return []steerCase{
		{"roce-v4", roce4, Redirected},
		{"roce-v4-options", roce4Opts, Redirected},
		{"roce-v4-vlan", frame(t, true, ip4(remote4, local4, layers.IPProtocolUDP), udp(49441, 4791), gopacket.Payload(bthPayload)), Redirected},
		{"roce-v6", frame(t, false, ip6(remote6, local6, layers.IPProtocolUDP), udp(49441, 4791), gopacket.Payload(bthPayload)), Redirected},
		{"roce-v6-vlan", frame(t, true, ip6(remote6, local6, layers.IPProtocolUDP), udp(49441, 4791), gopacket.Payload(bthPayload)), Redirected},
		{"roce-v4-not-local", frame(t, false, ip4(local4, remote4, layers.IPProtocolUDP), udp(49441, 4791), gopacket.Payload(bthPayload)), NotLocal},
		{"roce-v6-not-local", frame(t, false, ip6(local6, remote6, layers.IPProtocolUDP), udp(49441, 4791), gopacket.Payload(bthPayload)), NotLocal},
		{"roce-v4-src-port-4791", frame(t, false, ip4(remote4, local4, layers.IPProtocolUDP), udp(4791, 5000), gopacket.Payload(bthPayload)), NotRoCE},
		{"udp-v4", frame(t, false, ip4(remote4, local4, layers.IPProtocolUDP), udp(40000, 53), gopacket.Payload([]byte("dns?"))), NotRoCE},
		{"udp-v6", frame(t, false, ip6(remote6, local6, layers.IPProtocolUDP), udp(40000, 4792), gopacket.Payload([]byte("x"))), NotRoCE},
		{"tcp-v4", frame(t, false, ip4(remote4, local4, layers.IPProtocolTCP), &layers.TCP{SrcPort: 40000, DstPort: 4791, SYN: true, Window: 1000}), NotRoCE},
		{"tcp-v6", frame(t, false, ip6(remote6, local6, layers.IPProtocolTCP), &layers.TCP{SrcPort: 40000, DstPort: 18515, SYN: true, Window: 1000}), NotRoCE},
		{"icmp-v4", frame(t, false, ip4(remote4, local4, layers.IPProtocolICMPv4), &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 1}), NotRoCE},
		{"icmp-v6", frame(t, false, ip6(remote6, local6, layers.IPProtocolICMPv6), &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}, gopacket.Payload([]byte{0, 1, 0, 1})), NotRoCE},
		{"arp", frame(t, false, &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: macA, SourceProtAddress: remote4.AsSlice(), DstHwAddress: make([]byte, 6), DstProtAddress: local4.AsSlice()}), NotIP},
		{"arp-vlan", frame(t, true, &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: macA, SourceProtAddress: remote4.AsSlice(), DstHwAddress: make([]byte, 6), DstProtAddress: local4.AsSlice()}), NotIP},
		{"fragment-first", frame(t, false, frag, udp(49441, 4791), gopacket.Payload(bthPayload)), Fragment},
		{"fragment-last", frame(t, false, lastFrag, gopacket.Payload(bthPayload)), Fragment},
		{"fragment-v6", frame(t, false, ip6(remote6, local6, layers.IPProtocolIPv6Fragment), &layers.IPv6Fragment{NextHeader: layers.IPProtocolUDP, MoreFragments: true, Identification: 7}, gopacket.Payload(bthPayload)), Fragment},
		{"truncated-eth", roce4[:13], Truncated},
		{"truncated-vlan", frame(t, true, ip4(remote4, local4, layers.IPProtocolUDP), udp(49441, 4791))[:16], Truncated},
		{"truncated-ipv4", roce4[:14+19], Truncated},
		{"truncated-udp", roce4[:14+20+7], Truncated},
		{"truncated-ipv4-options", roce4Opts[:14+24+7], Truncated},
		{"truncated-ipv6", frame(t, false, ip6(remote6, local6, layers.IPProtocolUDP), udp(49441, 4791))[:14+39], Truncated},
		{"bad-ihl", func() []byte { f := append([]byte(nil), roce4...); f[14] = 0x44; return f }(), Truncated},
	}
}

func loadForTest(t testing.TB) *Program {
	t.Helper()
	testenv.Privileged(t)
	p, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for _, ip := range []netip.Addr{local4, local6} {
		if err := p.AddLocalIP(ip); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// runFrame runs the program over f once (BPF_PROG_TEST_RUN) and returns its
// action and the verdict counters that moved.
func runFrame(t *testing.T, p *Program, f []byte) (uint32, Counters) {
	t.Helper()
	before, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	ret, err := p.objs.XdpSteer.Run(&ebpf.RunOptions{Data: f})
	if err != nil {
		t.Fatalf("test run over %d bytes: %v", len(f), err)
	}
	after, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var d Counters
	for v := range NumVerdicts {
		d[v].Packets = after[v].Packets - before[v].Packets
		d[v].Bytes = after[v].Bytes - before[v].Bytes
	}
	return ret, d
}

func checkCounted(t *testing.T, d Counters, want Verdict, n int) {
	t.Helper()
	for v := range NumVerdicts {
		wp, wb := uint64(0), uint64(0)
		if v == want {
			wp, wb = 1, uint64(n)
		}
		if d[v].Packets != wp || d[v].Bytes != wb {
			t.Errorf("counter %v moved by %d packets / %d bytes, want %d / %d", v, d[v].Packets, d[v].Bytes, wp, wb)
		}
	}
}

// Without a socket in the XSKMAP, bpf_redirect_map falls back to XDP_PASS
// (the flags argument), and the frame counts as NoSocket: that is what the
// kernel does for a queue whose socket has gone.
func TestPrivilegedSteerNoSocket(t *testing.T) {
	p := loadForTest(t)
	for _, c := range steerCases(t) {
		t.Run(c.name, func(t *testing.T) {
			if len(c.frame) < 14 {
				t.Skip("the kernel's test run needs at least 14 bytes")
			}
			ret, d := runFrame(t, p, c.frame)
			if ret != 2 { // XDP_PASS
				t.Errorf("action %d, want XDP_PASS (2)", ret)
			}
			want := c.want
			if want == Redirected {
				want = NoSocket
			}
			checkCounted(t, d, want, len(c.frame))
		})
	}
}

// With an AF_XDP socket in slot 0 (the rx queue of a test run), RoCE for a
// local address returns XDP_REDIRECT; the test run reports the action without
// delivering the frame.
func TestPrivilegedSteerRedirect(t *testing.T) {
	p := loadForTest(t)
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := p.SetSocket(0, fd); err != nil {
		t.Fatal(err)
	}
	for _, c := range steerCases(t) {
		t.Run(c.name, func(t *testing.T) {
			if len(c.frame) < 14 {
				t.Skip("the kernel's test run needs at least 14 bytes")
			}
			ret, d := runFrame(t, p, c.frame)
			want := uint32(2)
			if c.want == Redirected {
				want = 4
			}
			if ret != want {
				t.Errorf("action %d, want %d", ret, want)
			}
			checkCounted(t, d, c.want, len(c.frame))
		})
	}
	// Removing the local address turns the same frame into NotLocal.
	if err := p.RemoveLocalIP(local4); err != nil {
		t.Fatal(err)
	}
	ret, d := runFrame(t, p, steerCases(t)[0].frame)
	if ret != 2 {
		t.Errorf("after RemoveLocalIP: action %d, want XDP_PASS", ret)
	}
	checkCounted(t, d, NotLocal, len(steerCases(t)[0].frame))
	// Removing the socket turns RoCE into NoSocket.
	if err := p.RemoveSocket(0); err != nil {
		t.Fatal(err)
	}
	v6 := steerCases(t)[3].frame
	if ret, d = runFrame(t, p, v6); ret != 2 {
		t.Errorf("after RemoveSocket: action %d, want XDP_PASS", ret)
	}
	checkCounted(t, d, NoSocket, len(v6))
}

func TestPrivilegedSteerBadArgs(t *testing.T) {
	p := loadForTest(t)
	if err := p.SetSocket(-1, 3); err == nil {
		t.Error("SetSocket(-1) succeeded")
	}
	if err := p.SetSocket(256, 3); err == nil {
		t.Error("SetSocket(256) succeeded")
	}
	if err := p.AddLocalIP(netip.Addr{}); err == nil {
		t.Error("AddLocalIP(invalid) succeeded")
	}
	// IPv4-mapped addresses land in the IPv4 set.
	if err := p.AddLocalIP(netip.MustParseAddr("::ffff:203.0.113.9")); err != nil {
		t.Fatal(err)
	}
	var one uint8
	if err := p.objs.LocalV4.Lookup([4]byte{203, 0, 113, 9}, &one); err != nil || one != 1 {
		t.Errorf("mapped address not in local_v4: %v", err)
	}
	if err := p.Attach("xdproce-no-such-if", ModeAuto); err == nil {
		t.Error("Attach to a missing interface succeeded")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := p.Attach("lo", ModeGeneric); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Attach after Close: %v", err)
	}
}

func TestVerdictNames(t *testing.T) {
	for v := range NumVerdicts {
		if verdictNames[v] == "" {
			t.Errorf("verdict %d has no name", v)
		}
	}
	if got := Verdict(99).String(); got != "Verdict(99)" {
		t.Errorf("Verdict(99) = %q", got)
	}
	if ModeNative.String() != "native" || ModeGeneric.String() != "generic" {
		t.Error("mode names")
	}
}
