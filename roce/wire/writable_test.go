package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdproce/xdproce/roce/wire"
)

// goldenFrames reads every RoCEv2 frame of testdata/pcaps/*.pcapng (the
// frames xdproce's own encoder wrote: IPv4, IPv6, VLAN, CNP, every transport).
// The RoCEv2 test accepts a VLAN tag and IPv6, unlike isRoCEv2.
func goldenFrames(tb testing.TB) []capturedFrame {
	tb.Helper()
	files, err := filepath.Glob("../../testdata/pcaps/*.pcapng")
	if err != nil {
		tb.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		tb.Fatal("no captures in testdata/pcaps")
	}
	var out []capturedFrame
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			tb.Fatal(err)
		}
		r, err := pcapgo.NewNgReader(fh, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			tb.Fatalf("%s: link type %v", f, r.LinkType())
		}
		for i := 1; ; i++ {
			data, _, err := r.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				tb.Fatalf("%s: %v", f, err)
			}
			if udpDst(data) == 4791 {
				out = append(out, capturedFrame{file: filepath.Base(f), index: i, data: data})
			}
		}
		fh.Close()
	}
	return out
}

// udpDst returns the UDP destination port of an Ethernet (802.1Q-tagged or
// not) IPv4 or IPv6 frame carrying UDP, or -1.
func udpDst(d []byte) int {
	off := udpOff(d)
	if off < 0 || len(d) < off+4 {
		return -1
	}
	return int(binary.BigEndian.Uint16(d[off+2:]))
}

// udpOff returns the offset of the UDP header of an Ethernet (802.1Q-tagged
// or not) IPv4 or IPv6 frame carrying UDP, or -1.
func udpOff(d []byte) int {
	if len(d) < 14 {
		return -1
	}
	off, et := 14, binary.BigEndian.Uint16(d[12:])
	if et == 0x8100 && len(d) >= 18 {
		off, et = 18, binary.BigEndian.Uint16(d[16:])
	}
	switch {
	case et == 0x0800 && len(d) >= off+20 && d[off+9] == 17:
		off += int(d[off]&0xF) * 4
	case et == 0x86DD && len(d) >= off+40 && d[off+6] == 17:
		off += 40
	default:
		return -1
	}
	return off
}

// builtFrames encodes every opcode with several payload lengths over IPv4,
// IPv4 with options, IPv6, each with and without a VLAN tag.
func builtFrames(t *testing.T) []capturedFrame {
	rng := rand.New(rand.NewPCG(7, 8))
	var out []capturedFrame
	for _, f := range opcodeFacts {
		info, _ := f.op.Info()
		for _, n := range payloadLens(info) {
			for _, c := range []struct {
				v6, vlan bool
				opts     int
			}{{false, false, 0}, {false, true, 0}, {false, false, 4}, {false, true, 40}, {true, false, 0}, {true, true, 0}} {
				p := randomPacket(rng, f.op, c.v6, c.vlan, c.opts, n)
				buf := make([]byte, p.FrameLen())
				if _, err := p.Encode(buf); err != nil {
					t.Fatalf("%v %+v: %v", f.name, c, err)
				}
				out = append(out, capturedFrame{file: f.name, index: len(out) + 1, data: buf})
			}
		}
	}
	return out
}

var cmpPacket = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// acceptVendor accepts both families of xdproce's manufacturer-specific
// opcodes: OOO (0xC0..) and SR (0xE0..).
const acceptVendor = wire.AcceptOOO | wire.AcceptSR

// checkWritable decodes frame with Decode and with DecodeWritable, and with
// both under acceptVendor, and fails unless each pair gives the same error and
// the same Packet (slices aliasing the same bytes), frame is left as it was,
// and acceptVendor changes nothing but the verdict on the OOO and SR opcodes,
// which Decode alone refuses as unknown. It returns the acceptVendor error.
func checkWritable(t *testing.T, name string, frame []byte) error {
	t.Helper()
	std := checkWritableWith(t, name, frame, 0)
	err := checkWritableWith(t, name+" AcceptOOO|AcceptSR", frame, acceptVendor)
	ooo := false
	if off := udpOff(frame); off >= 0 && len(frame) > off+8 {
		ooo = frame[off+8]&0xC0 == 0xC0 && wire.Opcode(frame[off+8]).Known()
	}
	if std != err && (!ooo || !errors.Is(std, wire.ErrUnknownOpcode)) {
		t.Fatalf("%s: Decode: %v, with AcceptOOO: %v", name, std, err)
	}
	if ooo && std == nil {
		t.Fatalf("%s: an OOO frame decodes without AcceptOOO", name)
	}
	return err
}

func checkWritableWith(t *testing.T, name string, frame []byte, flags wire.DecodeFlags) error {
	t.Helper()
	orig := bytes.Clone(frame)
	var p, q wire.Packet
	perr := p.DecodeWith(frame, flags)
	if !bytes.Equal(frame, orig) {
		t.Fatalf("%s: Decode changed the frame", name)
	}
	qerr := q.DecodeWith(frame, flags|wire.InPlace)
	if !bytes.Equal(frame, orig) {
		t.Fatalf("%s: DecodeWritable left the frame changed\n got %x\nwant %x", name, frame, orig)
	}
	if perr != qerr {
		t.Fatalf("%s: Decode: %v, DecodeWritable: %v", name, perr, qerr)
	}
	if flags == 0 {
		var r, w wire.Packet
		if rerr, werr := r.Decode(frame), w.DecodeWritable(frame); rerr != perr || werr != perr {
			t.Fatalf("%s: DecodeWith(0) %v, Decode %v, DecodeWritable %v", name, perr, rerr, werr)
		}
	}
	if perr != nil && !errors.Is(perr, wire.ErrBadICRC) && !errors.Is(perr, wire.ErrBadChecksum) {
		return perr // p undefined: nothing more to compare
	}
	pa, qa := p, q
	pa.Payload, pa.IPOptions, qa.Payload, qa.IPOptions = nil, nil, nil, nil
	if !reflect.DeepEqual(pa, qa) || !bytes.Equal(p.Payload, q.Payload) || !bytes.Equal(p.IPOptions, q.IPOptions) ||
		len(p.Payload) != len(q.Payload) || len(p.IPOptions) != len(q.IPOptions) {
		t.Fatalf("%s: DecodeWritable differs from Decode (-Decode +DecodeWritable):\n%s", name, cmp.Diff(p, q, cmpPacket))
	}
	if unsafe.SliceData(p.Payload) != unsafe.SliceData(q.Payload) || unsafe.SliceData(p.IPOptions) != unsafe.SliceData(q.IPOptions) {
		t.Fatalf("%s: Payload or IPOptions do not alias the same bytes", name)
	}
	return perr
}

func TestDecodeWritableMatchesDecode(t *testing.T) {
	sets := map[string][]capturedFrame{
		"rxe":    rxeFrames(t),
		"golden": goldenFrames(t),
		"built":  builtFrames(t),
	}
	kinds := map[string]int{}
	for set, frames := range sets {
		if len(frames) == 0 {
			t.Fatalf("%s: no frames", set)
		}
		for _, f := range frames {
			if err := checkWritable(t, set+" "+f.String(), f.data); err != nil {
				t.Errorf("%s %v: %v", set, f, err)
				continue
			}
			var p wire.Packet
			_ = p.DecodeWith(f.data, acceptVendor)
			switch {
			case p.IPv6 && p.HasVLAN:
				kinds["ipv6+vlan"]++
			case p.IPv6:
				kinds["ipv6"]++
			case len(p.IPOptions) > 0:
				kinds["ipv4+options"]++
			case p.HasVLAN:
				kinds["ipv4+vlan"]++
			default:
				kinds["ipv4"]++
			}
		}
	}
	for _, k := range []string{"ipv4", "ipv4+vlan", "ipv4+options", "ipv6", "ipv6+vlan"} {
		if kinds[k] == 0 {
			t.Errorf("no %s frame compared", k)
		}
	}
	// The golden captures hold IPv6 and VLAN frames of their own.
	var v6, vlan int
	for _, f := range sets["golden"] {
		var p wire.Packet
		if err := p.DecodeWith(f.data, acceptVendor|wire.InPlace); err != nil {
			t.Fatalf("golden %v: %v", f, err)
		}
		if p.IPv6 {
			v6++
		}
		if p.HasVLAN {
			vlan++
		}
	}
	if v6 == 0 || vlan == 0 {
		t.Errorf("golden captures: %d IPv6, %d VLAN frames; want some of each", v6, vlan)
	}
	t.Logf("frames compared: rxe %d, golden %d, built %d; %v", len(sets["rxe"]), len(sets["golden"]), len(sets["built"]), kinds)
}

// TestDecodeWritableErrors: the malformed frames, and random damage to
// captured frames (bytes overwritten, frames cut, lengths changed), give
// the same error from both decoders and leave the frame as it was.
func TestDecodeWritableErrors(t *testing.T) {
	for _, c := range malformedCases(t) {
		err := checkWritable(t, c.name, c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(9, 10))
	frames := append(rxeFrames(t), goldenFrames(t)...)
	errs := map[string]int{}
	for i := range 20000 {
		f := frames[rng.IntN(len(frames))]
		b := bytes.Clone(f.data)
		switch rng.IntN(3) {
		case 0: // a few random bytes anywhere in the first 64
			for range 1 + rng.IntN(3) {
				b[rng.IntN(min(len(b), 64))] = byte(rng.Uint32())
			}
		case 1: // cut
			b = b[:rng.IntN(len(b)+1)]
		case 2: // Ethernet padding, or a byte of the payload
			if rng.IntN(2) == 0 {
				b = append(b, make([]byte, rng.IntN(40))...)
			} else {
				b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			}
		}
		err := checkWritable(t, f.String()+" damage "+itoa(i), b)
		errs[sentinelOf(err)]++
	}
	t.Logf("verdicts %v", errs)
}

// sentinelOf names the sentinel err wraps ("ok" for nil).
func sentinelOf(err error) string {
	if err == nil {
		return "ok"
	}
	for n, s := range sentinels {
		if errors.Is(err, s) {
			return n
		}
	}
	return "?"
}

func TestSetICRCInPlace(t *testing.T) {
	for _, f := range append(rxeFrames(t), goldenFrames(t)...) {
		b := bytes.Clone(f.data)
		binary.LittleEndian.PutUint32(b[len(b)-4:], 0xdeadbeef)
		if err := wire.SetICRC(b); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if !bytes.Equal(b, f.data) {
			t.Fatalf("%v: SetICRC gives\n%x\nwant\n%x", f, b, f.data)
		}
	}
}

// refChecksum is RFC 1071 written the plain way: 16-bit words, fold at the
// end.
func refChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	if len(h)&1 == 1 {
		s += uint32(h[len(h)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}

func TestIPv4ChecksumReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for n := range 70 {
		for k := range 200 {
			h := make([]byte, n)
			switch k {
			case 0: // all ones: the most carries
				for i := range h {
					h[i] = 0xFF
				}
			case 1: // all zeros
			default:
				for i := range h {
					h[i] = byte(rng.Uint32())
				}
			}
			if got, want := wire.IPv4Checksum(h), refChecksum(h); got != want {
				t.Fatalf("%d bytes %x: %#04x, want %#04x", n, h, got, want)
			}
		}
	}
	big := make([]byte, 65535)
	for i := range big {
		big[i] = 0xFF
	}
	if got, want := wire.IPv4Checksum(big), refChecksum(big); got != want {
		t.Fatalf("65535 bytes of ones: %#04x, want %#04x", got, want)
	}
	// A header with its checksum stored sums to 0, for every IHL.
	for ihl := 5; ihl <= 15; ihl++ {
		h := make([]byte, ihl*4)
		for i := range h {
			h[i] = byte(rng.Uint32())
		}
		h[10], h[11] = 0, 0
		binary.BigEndian.PutUint16(h[10:], wire.IPv4Checksum(h))
		if c := wire.IPv4Checksum(h); c != 0 {
			t.Errorf("IHL %d: checksum over a checked header %#04x, want 0", ihl, c)
		}
	}
}
