package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdproce/xdproce/roce/wire"
)

// findFrame returns the first captured frame with the opcode and payload
// length (-1: any).
func findFrame(t *testing.T, op wire.Opcode, n int) []byte {
	t.Helper()
	for _, f := range rxeFrames(t) {
		var p wire.Packet
		if p.Decode(f.data) == nil && p.BTH.Opcode == op && (n < 0 || len(p.Payload) == n) {
			return f.data
		}
	}
	t.Fatalf("no %v frame with %d bytes of payload", op, n)
	return nil
}

type malformedCase struct {
	name  string
	frame []byte
	want  error
}

// malformedCases are broken frames, each with the sentinel Decode must
// return; testdata/malformed/malformed.pcap holds them for other packages.
func malformedCases(t *testing.T) []malformedCase {
	send := findFrame(t, wire.RCSendOnly, 64) // 14 | 20 | 8 | BTH 12 | 64 | ICRC
	ack := findFrame(t, wire.RCAck, -1)
	const ip, udp, bth = 14, 34, 42
	rng := rand.New(rand.NewPCG(5, 6))
	padded := func() []byte { // RC_SEND_LAST, 5 bytes of payload, 3 of pad
		p := randomPacket(rng, wire.RCSendLast, false, false, 0, 5)
		b := make([]byte, p.FrameLen())
		if _, err := p.Encode(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	mod := func(base []byte, f func(b []byte)) []byte {
		b := bytes.Clone(base)
		f(b)
		return b
	}
	v6 := func() []byte {
		p := randomPacket(rng, wire.RCSendOnly, true, false, 0, 64)
		b := make([]byte, p.FrameLen())
		if _, err := p.Encode(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	return []malformedCase{
		{"empty", nil, wire.ErrTruncated},
		{"ethernet only", send[:14], wire.ErrTruncated},
		{"vlan tag cut", mod(send[:16], func(b []byte) { b[12], b[13] = 0x81, 0 }), wire.ErrTruncated},
		{"ARP", mod(send, func(b []byte) { b[12], b[13] = 0x08, 0x06 }), wire.ErrNotRoCE},
		{"QinQ", mod(send, func(b []byte) { b[12], b[13] = 0x88, 0xA8 }), wire.ErrNotRoCE},
		{"IPv4 cut", send[:30], wire.ErrTruncated},
		{"IPv4 version 5", mod(send, func(b []byte) { b[ip] = 0x55 }), wire.ErrNotRoCE},
		{"IHL 4", mod(send, func(b []byte) { b[ip] = 0x44 }), wire.ErrBadLength},
		{"IHL 15 past total", mod(send, func(b []byte) { b[ip] = 0x4F }), wire.ErrBadLength},
		{"total length past frame", send[:len(send)-1], wire.ErrTruncated},
		{"total length 27", mod(send, func(b []byte) { binary.BigEndian.PutUint16(b[ip+2:], 27) }), wire.ErrBadLength},
		{"total length 1 short", mod(send, func(b []byte) { binary.BigEndian.PutUint16(b[ip+2:], uint16(len(b)-14-1)) }), wire.ErrBadLength},
		{"MF", mod(send, func(b []byte) { b[ip+6] |= 0x20 }), wire.ErrNotRoCE},
		{"fragment offset", mod(send, func(b []byte) { b[ip+7] = 1 }), wire.ErrNotRoCE},
		{"TCP", mod(send, func(b []byte) { b[ip+9] = 6 }), wire.ErrNotRoCE},
		{"UDP length +1", mod(send, func(b []byte) { b[udp+5]++ }), wire.ErrBadLength},
		{"UDP length -4", mod(send, func(b []byte) { b[udp+5] -= 4 }), wire.ErrBadLength},
		{"port 4790", mod(send, func(b []byte) { b[udp+3]-- }), wire.ErrNotRoCE},
		{"UDP only", mod(send[:udp+8], func(b []byte) { b[ip+3] = 28; b[udp+5] = 8 }), wire.ErrTruncated},
		{"TVer 1", mod(send, func(b []byte) { b[bth+1] |= 1 }), wire.ErrBadVersion},
		{"opcode 0x15", mod(send, func(b []byte) { b[bth] = 0x15 }), wire.ErrUnknownOpcode},
		{"RD opcode", mod(send, func(b []byte) { b[bth] = 0x44 }), wire.ErrUnknownOpcode},
		{"ACK with payload", mod(send, func(b []byte) { b[bth] = byte(wire.RCAck) }), wire.ErrBadLength},
		{"READ request with payload", mod(send, func(b []byte) { b[bth] = byte(wire.RCReadRequest) }), wire.ErrBadLength},
		{"FIRST of 64", mod(send, func(b []byte) { b[bth] = byte(wire.RCSendFirst) }), wire.ErrBadLength},
		{"MIDDLE of 64", mod(send, func(b []byte) { b[bth] = byte(wire.RCWriteMiddle) }), wire.ErrBadLength},
		{"CNP of 64", mod(send, func(b []byte) { b[bth] = byte(wire.CNP) }), wire.ErrBadLength},
		{"atomic cut", mod(send[:bth+36], func(b []byte) {
			b[bth] = byte(wire.RCCompareSwap)
			binary.BigEndian.PutUint16(b[ip+2:], uint16(len(b)-14))
			binary.BigEndian.PutUint16(b[udp+4:], uint16(len(b)-udp))
		}), wire.ErrTruncated},
		{"ACK pad 1", mod(ack, func(b []byte) { b[bth+1] |= 0x10 }), wire.ErrBadPadCount},
		{"pad byte", mod(padded(), func(b []byte) { b[len(b)-5] = 1 }), wire.ErrBadPadCount},
		{"LAST empty", mod(ack, func(b []byte) { b[bth] = byte(wire.RCWriteLastImm) }), wire.ErrBadLength},
		{"unaligned", mod(append(bytes.Clone(send), 0), func(b []byte) {
			binary.BigEndian.PutUint16(b[ip+2:], uint16(len(b)-14))
			binary.BigEndian.PutUint16(b[udp+4:], uint16(len(b)-udp))
		}), wire.ErrBadLength},
		{"IPv4 checksum", mod(send, func(b []byte) { b[ip+10]++ }), wire.ErrBadChecksum},
		{"ICRC", mod(send, func(b []byte) { b[len(b)-1]++ }), wire.ErrBadICRC},
		{"payload", mod(send, func(b []byte) { b[bth+12]++ }), wire.ErrBadICRC},
		{"IPv6 cut", v6()[:14+39], wire.ErrTruncated},
		{"IPv6 version 4 in 86dd", mod(v6(), func(b []byte) { b[ip] = 0x40 | b[ip]&0xF }), wire.ErrNotRoCE},
		{"IPv6 next header 0", mod(v6(), func(b []byte) { b[ip+6] = 0 }), wire.ErrNotRoCE},
		{"IPv6 payload length past frame", mod(v6(), func(b []byte) { b[ip+5]++ }), wire.ErrTruncated},
		{"IPv6 payload length short", mod(v6(), func(b []byte) { b[ip+5] -= 4 }), wire.ErrBadLength},
		{"IPv6 ICRC", mod(v6(), func(b []byte) { b[len(b)-4] ^= 0x80 }), wire.ErrBadICRC},
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range malformedCases(t) {
		var p wire.Packet
		err := p.Decode(c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Decode = %v, want %v", c.name, err, c.want)
			continue
		}
		var e *wire.Error
		if !errors.As(err, &e) || e.Op == "" || e.Msg == "" {
			t.Errorf("%s: %v is not a *wire.Error with place", c.name, err)
		}
	}
}

func TestDecodeChecksumErrorsFillFields(t *testing.T) {
	send := findFrame(t, wire.RCSendOnly, 64)
	var want wire.Packet
	if err := want.Decode(send); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off  int
		want error
	}{{24, wire.ErrBadChecksum}, {len(send) - 2, wire.ErrBadICRC}, {60, wire.ErrBadICRC}} {
		b := bytes.Clone(send)
		b[c.off] ^= 0x40
		var p wire.Packet
		if err := p.Decode(b); !errors.Is(err, c.want) {
			t.Fatalf("offset %d: %v, want %v", c.off, err, c.want)
		}
		if p.BTH != want.BTH || p.SrcIP != want.SrcIP || p.SrcPort != want.SrcPort || len(p.Payload) != 64 {
			t.Errorf("offset %d: fields not filled in: %+v", c.off, p)
		}
	}
}

func TestDecodeTruncations(t *testing.T) {
	for _, f := range corruptFrames(t) {
		for n := range len(f.data) {
			var p wire.Packet
			if err := p.Decode(f.data[:n]); !errors.Is(err, wire.ErrTruncated) {
				t.Errorf("%v cut to %d bytes: %v, want ErrTruncated", f, n, err)
			}
		}
	}
}

// TestEthernetPadding: bytes after the IP packet (Ethernet padding to 60
// bytes, or an FCS) are ignored.
func TestEthernetPadding(t *testing.T) {
	ack := findFrame(t, wire.RCAck, -1)
	var want wire.Packet
	if err := want.Decode(ack); err != nil {
		t.Fatal(err)
	}
	padded := append(bytes.Clone(ack), 0xDE, 0xAD, 0xBE, 0xEF, 0, 0, 0, 0, 0, 0)
	var p wire.Packet
	if err := p.Decode(padded); err != nil {
		t.Fatal(err)
	}
	if p.FrameLen() != len(ack) || p.BTH != want.BTH || p.AETH != want.AETH || p.ICRC != want.ICRC {
		t.Errorf("padded frame decodes differently: %+v", p)
	}
	if err := wire.VerifyICRC(padded); err != nil {
		t.Errorf("VerifyICRC(padded) = %v", err)
	}
}

// TestSourcePort4791: a sender on a kernel UDP socket bound to 4791 sends
// from 4791 (host_peer_rc_pingpong.pcap has such packets); any source port
// is accepted.
func TestAnySourcePort(t *testing.T) {
	n := 0
	for _, f := range rxeFrames(t) {
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		if p.SrcPort == wire.UDPPort {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d captured frames from port 4791, want 2 (host_peer_rc_pingpong)", n)
	}
}

var updateMalformed = flag.Bool("update-malformed", false, "rewrite testdata/malformed from malformedCases")

var sentinels = map[string]error{
	"ErrTruncated": wire.ErrTruncated, "ErrUnknownOpcode": wire.ErrUnknownOpcode, "ErrBadPadCount": wire.ErrBadPadCount,
	"ErrBadICRC": wire.ErrBadICRC, "ErrBadLength": wire.ErrBadLength, "ErrNotRoCE": wire.ErrNotRoCE,
	"ErrBadVersion": wire.ErrBadVersion, "ErrBadChecksum": wire.ErrBadChecksum,
}

func sentinelName(err error) string {
	for n, s := range sentinels {
		if s == err {
			return n
		}
	}
	return "?"
}

// TestMalformedCorpus decodes testdata/malformed/malformed.pcap: every frame
// must fail with the sentinel named on its line of malformed.txt.
func TestMalformedCorpus(t *testing.T) {
	const dir = "../../testdata/malformed"
	if *updateMalformed {
		var pc, txt bytes.Buffer
		w := pcapgo.NewWriter(&pc)
		if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
			t.Fatal(err)
		}
		txt.WriteString("# frame number, sentinel wire.Decode returns, what is wrong (generated by go test ./roce/wire -run MalformedCorpus -update-malformed)\n")
		for i, c := range malformedCases(t) {
			ci := gopacket.CaptureInfo{Timestamp: time.Unix(1795000000, int64(i)*1000).UTC(), CaptureLength: len(c.frame), Length: len(c.frame)}
			if err := w.WritePacket(ci, c.frame); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&txt, "%d\t%s\t%s\n", i+1, sentinelName(c.want), c.name)
		}
		if err := os.WriteFile(dir+"/malformed.pcap", pc.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/malformed.txt", txt.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	txt, err := os.ReadFile(dir + "/malformed.txt")
	if err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(dir + "/malformed.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(txt)), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.SplitN(line, "\t", 3)
		want := sentinels[fields[1]]
		data, _, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("frame %s: %v", fields[0], err)
		}
		n++
		var p wire.Packet
		if err := p.Decode(data); want == nil || !errors.Is(err, want) {
			t.Errorf("frame %s (%s): Decode = %v, want %s", fields[0], fields[2], err, fields[1])
		}
	}
	if _, _, err := r.ReadPacketData(); err != io.EOF {
		t.Errorf("more frames than lines in malformed.txt")
	}
	if n < 30 {
		t.Errorf("only %d malformed frames", n)
	}
}
