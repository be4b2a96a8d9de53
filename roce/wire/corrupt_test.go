package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

// frameLayout gives the offsets the corruption rules need.
type frameLayout struct {
	l2, l4 int // start of the IP header, of the UDP header
	v6     bool
	vlan   bool
}

func layoutOf(frame []byte) frameLayout {
	var l frameLayout
	l.l2 = 14
	if binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		l.l2, l.vlan = 18, true
	}
	if frame[l.l2]>>4 == 6 {
		l.v6, l.l4 = true, l.l2+40
	} else {
		l.l4 = l.l2 + int(frame[l.l2]&0xF)*4
	}
	return l
}

// flipVerdict says what Decode must do with frame after flipping bit of
// byte i: nil (decodes; the field is not covered by the ICRC), or a sentinel
// the error must match (ErrBadChecksum), or errAny (some error).
var errAny = errors.New("any error")

func flipVerdict(l frameLayout, i int, bit uint) error {
	switch {
	case i < 12: // MAC addresses: not covered by the ICRC.
		return nil
	case l.vlan && (i == 14 || i == 15): // 802.1Q TCI: not covered either.
		return nil
	case l.v6 && i == l.l2 && bit < 4: // IPv6 traffic class (high nibble)
		return nil
	case l.v6 && i >= l.l2+1 && i <= l.l2+3: // traffic class, flow label
		return nil
	case l.v6 && i == l.l2+7: // hop limit
		return nil
	case !l.v6 && (i == l.l2+1 || i == l.l2+8 || i == l.l2+10 || i == l.l2+11):
		// IPv4 TOS, TTL, header checksum: masked in the ICRC, caught by the
		// IPv4 header checksum, which Decode verifies.
		return wire.ErrBadChecksum
	case i == l.l4+6 || i == l.l4+7: // UDP checksum: masked, not verified
		return nil
	case i == l.l4+8+4: // BTH FECN, BECN, Resv6: masked
		return nil
	}
	return errAny
}

// corruptFrames picks frames of different kinds: captured ACK, SEND_ONLY
// with payload, READ request and response, atomics and their ACK, UD, a UD
// MAD on QP1, WRITE with immediate; built IPv6, VLAN + IPv4 options and CNP
// frames.
func corruptFrames(t *testing.T) []capturedFrame {
	var out []capturedFrame
	want := map[string]bool{}
	for _, f := range rxeFrames(t) {
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		key := p.BTH.Opcode.String()
		if p.BTH.Opcode == wire.UDSendOnly && p.DETH.QKey == wire.GSIQKey {
			key = "UD MAD"
		}
		if p.BTH.Opcode == wire.RCSendOnly && len(p.Payload) == 0 {
			key = "empty SEND"
		}
		if !want[key] {
			want[key] = true
			out = append(out, f)
		}
	}
	for _, need := range []string{"RC_ACKNOWLEDGE", "RC_SEND_ONLY", "RC_RDMA_READ_REQUEST", "RC_COMPARE_SWAP",
		"RC_ATOMIC_ACKNOWLEDGE", "UD_SEND_ONLY", "UD MAD", "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"} {
		if !want[need] {
			t.Fatalf("no %s frame in the captures", need)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, b := range []struct {
		name string
		op   wire.Opcode
		v6   bool
		vlan bool
		opts int
		n    int
	}{
		{"ipv6 send", wire.RCSendOnlyImm, true, false, 0, 37},
		{"vlan+options write", wire.RCWriteLast, false, true, 8, 5},
		{"ipv6 vlan cnp", wire.CNP, true, true, 0, 16},
	} {
		p := randomPacket(rng, b.op, b.v6, b.vlan, b.opts, b.n)
		buf := make([]byte, p.FrameLen())
		if _, err := p.Encode(buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, capturedFrame{file: b.name, data: buf})
	}
	return out
}

// decoders are the two ways to decode a frame; every corruption test runs
// both.
var decoders = []struct {
	name   string
	decode func(p *wire.Packet, frame []byte) error
}{
	{"Decode", (*wire.Packet).Decode},
	{"DecodeWritable", (*wire.Packet).DecodeWritable},
}

func TestCorruption(t *testing.T) {
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) { testCorruption(t, d.decode) })
	}
}

func testCorruption(t *testing.T, decode func(*wire.Packet, []byte) error) {
	// Every bit of every captured frame (about a million decodes, 0.2 s),
	// plus the built IPv6, VLAN + options and CNP frames.
	frames := append(rxeFrames(t), corruptFrames(t)[len(corruptFrames(t))-3:]...)
	var p, q wire.Packet
	buf := make([]byte, 9000)
	counts := map[string]int{}
	for _, f := range frames {
		l := layoutOf(f.data)
		frame := bytes.Clone(f.data)
		for i := range frame {
			for bit := uint(0); bit < 8; bit++ {
				frame[i] ^= 1 << bit
				err := decode(&p, frame)
				switch want := flipVerdict(l, i, bit); want {
				case nil:
					counts["decodes"]++
					if err != nil {
						t.Errorf("%v: flip byte %d bit %d: %v, want success", f, i, bit, err)
						break
					}
					// The flipped field is in the Packet: re-encoding
					// gives the flipped frame.
					q = p
					q.Payload = append([]byte(nil), p.Payload...)
					n, err := q.Encode(buf)
					if err != nil || !bytes.Equal(buf[:n], frame) {
						t.Errorf("%v: flip byte %d bit %d: re-encoding differs (%v)", f, i, bit, err)
					}
				case errAny:
					counts["errors"]++
					if err == nil {
						t.Errorf("%v: flip byte %d bit %d: decoded", f, i, bit)
					}
				default:
					counts[strings.TrimPrefix(want.Error(), "bad ")]++
					if !errors.Is(err, want) {
						t.Errorf("%v: flip byte %d bit %d: %v, want %v", f, i, bit, err, want)
					}
				}
				frame[i] ^= 1 << bit
			}
		}
		// DecodeWritable restores what it masks: a byte left changed
		// would stay changed, since every flip is undone by XOR.
		if !bytes.Equal(frame, f.data) {
			t.Fatalf("%v: frame changed by decoding\n got %x\nwant %x", f, frame, f.data)
		}
	}
	t.Logf("%d frames, verdicts %v", len(frames), counts)
}

// TestCorruptionDoubleFlips (-long) flips every pair of bits of a few small
// frames. CRC-32 detects every 2-bit error at these lengths, so a pair is
// caught unless both bits sit in fields the ICRC does not cover; pairs that
// both hit the IPv4 fields only the header checksum covers are skipped (two
// flips can cancel in a ones'-complement sum).
func TestCorruptionDoubleFlips(t *testing.T) {
	if !*long {
		t.Skip("needs -long")
	}
	var frames []capturedFrame
	for _, f := range corruptFrames(t) {
		if len(f.data) <= 330 { // up to the UD MADs
			frames = append(frames, f)
		}
	}
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) { testCorruptionDoubleFlips(t, frames, d.decode) })
	}
}

func testCorruptionDoubleFlips(t *testing.T, frames []capturedFrame, decode func(*wire.Packet, []byte) error) {
	var p wire.Packet
	pairs := 0
	for _, f := range frames {
		l := layoutOf(f.data)
		frame := bytes.Clone(f.data)
		nbits := len(frame) * 8
		for a := 0; a < nbits; a++ {
			va := flipVerdict(l, a/8, uint(a%8))
			frame[a/8] ^= 1 << (a % 8)
			for b := a + 1; b < nbits; b++ {
				vb := flipVerdict(l, b/8, uint(b%8))
				if va == wire.ErrBadChecksum && vb == wire.ErrBadChecksum {
					continue
				}
				frame[b/8] ^= 1 << (b % 8)
				err := decode(&p, frame)
				frame[b/8] ^= 1 << (b % 8)
				pairs++
				switch {
				case va == errAny || vb == errAny:
					if err == nil {
						t.Fatalf("%v: bits %d and %d flipped: decoded", f, a, b)
					}
				case va == wire.ErrBadChecksum || vb == wire.ErrBadChecksum:
					if !errors.Is(err, wire.ErrBadChecksum) {
						t.Fatalf("%v: bits %d and %d flipped: %v, want ErrBadChecksum", f, a, b, err)
					}
				default:
					if err != nil {
						t.Fatalf("%v: bits %d and %d (uncovered fields) flipped: %v", f, a, b, err)
					}
				}
			}
			frame[a/8] ^= 1 << (a % 8)
		}
	}
	t.Logf("%d frames, %d pairs", len(frames), pairs)
}
