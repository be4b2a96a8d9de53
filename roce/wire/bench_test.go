package wire_test

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

func benchPacket(n int) wire.Packet {
	return wire.Packet{
		DstMAC: [6]byte{0x52, 0x54, 0xc0, 0, 2, 0x0b}, SrcMAC: [6]byte{0x52, 0x54, 0xc0, 0, 2, 0x0c},
		SrcIP: netip.MustParseAddr("198.51.100.1"), DstIP: netip.MustParseAddr("198.51.100.2"),
		TTL: 64, IPFlags: wire.IPv4DontFragment,
		SrcPort: wire.SourcePort(0x11, 0x11), DstPort: wire.UDPPort,
		BTH:     wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQPN: 0x11, AckReq: true, PSN: 0xc829ba},
		Payload: make([]byte, n),
	}
}

var benchSizes = []int{64, 1024, 4096}

func BenchmarkEncode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("payload="+strconv.Itoa(n), func(b *testing.B) {
			p := benchPacket(n)
			buf := make([]byte, p.FrameLen())
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if _, err := p.Encode(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeInPlace: the transmit path, payload already copied.
func BenchmarkEncodeInPlace(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("payload="+strconv.Itoa(n), func(b *testing.B) {
			p := benchPacket(n)
			buf := make([]byte, p.FrameLen())
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if _, err := p.EncodeInPlace(buf, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode: Decode of a whole frame, ICRC verification included.
func BenchmarkDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("payload="+strconv.Itoa(n), func(b *testing.B) {
			p := benchPacket(n)
			buf := make([]byte, p.FrameLen())
			if _, err := p.Encode(buf); err != nil {
				b.Fatal(err)
			}
			var q wire.Packet
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := q.Decode(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeWritable: the receive path, ICRC hashed in place.
func BenchmarkDecodeWritable(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("payload="+strconv.Itoa(n), func(b *testing.B) {
			p := benchPacket(n)
			buf := make([]byte, p.FrameLen())
			if _, err := p.Encode(buf); err != nil {
				b.Fatal(err)
			}
			var q wire.Packet
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := q.DecodeWritable(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func ackFrame(b *testing.B) []byte {
	p := benchPacket(0)
	p.BTH.Opcode = wire.RCAck
	p.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), MSN: 1}
	buf := make([]byte, p.FrameLen())
	if _, err := p.Encode(buf); err != nil {
		b.Fatal(err)
	}
	return buf
}

// BenchmarkDecodeACK: the smallest frame, the commonest on the receive path.
func BenchmarkDecodeACK(b *testing.B) {
	buf := ackFrame(b)
	var q wire.Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := q.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeWritableACK(b *testing.B) {
	buf := ackFrame(b)
	var q wire.Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := q.DecodeWritable(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkComputeICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("payload="+strconv.Itoa(n), func(b *testing.B) {
			p := benchPacket(n)
			buf := make([]byte, p.FrameLen())
			if _, err := p.Encode(buf); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if _, err := wire.ComputeICRC(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSetICRC: ComputeICRC's work done in place (and stored).
func BenchmarkSetICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("payload="+strconv.Itoa(n), func(b *testing.B) {
			p := benchPacket(n)
			buf := make([]byte, p.FrameLen())
			if _, err := p.Encode(buf); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := wire.SetICRC(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIPv4Checksum: the 20-byte header every IPv4 frame carries.
func BenchmarkIPv4Checksum(b *testing.B) {
	p := benchPacket(0)
	buf := make([]byte, p.FrameLen())
	if _, err := p.Encode(buf); err != nil {
		b.Fatal(err)
	}
	h := buf[14:34]
	for b.Loop() {
		if wire.IPv4Checksum(h) != 0 {
			b.Fatal("bad checksum")
		}
	}
}
