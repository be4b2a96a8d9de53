package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdproce/xdproce/roce/wire"
)

// capturedFrame is one UDP/4791 frame of the rxe reference captures.
type capturedFrame struct {
	file  string
	index int // packet number in the file, from 1
	data  []byte
}

func (c capturedFrame) String() string { return c.file + "#" + itoa(c.index) }

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	if i == 0 {
		return "0"
	}
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}

// rxeFrames reads every UDP/4791 frame of testdata/rxe/*.pcap. It finds them
// with a minimal parser of its own (Ethernet, IPv4, UDP destination port), so
// the count does not depend on the package under test.
func rxeFrames(tb testing.TB) []capturedFrame {
	tb.Helper()
	files, err := filepath.Glob("../../testdata/rxe/*.pcap")
	if err != nil {
		tb.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		tb.Fatal("no captures in testdata/rxe")
	}
	var out []capturedFrame
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			tb.Fatal(err)
		}
		r, err := pcapgo.NewReader(fh)
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		for i := 1; ; i++ {
			data, ci, err := r.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				tb.Fatalf("%s: %v", f, err)
			}
			if ci.CaptureLength != ci.Length {
				tb.Fatalf("%s#%d: truncated capture", f, i)
			}
			if isRoCEv2(data) {
				out = append(out, capturedFrame{file: filepath.Base(f), index: i, data: data})
			}
		}
		fh.Close()
	}
	return out
}

func isRoCEv2(d []byte) bool {
	if len(d) < 14+20+8 || binary.BigEndian.Uint16(d[12:]) != 0x0800 || d[14+9] != 17 {
		return false
	}
	ihl := int(d[14]&0xF) * 4
	return len(d) >= 14+ihl+8 && binary.BigEndian.Uint16(d[14+ihl+2:]) == 4791
}

func TestCapturesDecodeVerifyReencode(t *testing.T) {
	frames := rxeFrames(t)
	if len(frames) != 347 {
		t.Fatalf("found %d UDP/4791 frames in testdata/rxe, want 347", len(frames))
	}
	seen := map[wire.Opcode]int{}
	for _, f := range frames {
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Errorf("%v: Decode: %v", f, err)
			continue
		}
		seen[p.BTH.Opcode]++
		icrc, err := wire.ComputeICRC(f.data)
		if err != nil || icrc != p.ICRC || icrc != binary.LittleEndian.Uint32(f.data[len(f.data)-4:]) {
			t.Errorf("%v: ComputeICRC = %#x, %v; stored %#x", f, icrc, err, p.ICRC)
		}
		if err := wire.VerifyICRC(f.data); err != nil {
			t.Errorf("%v: VerifyICRC: %v", f, err)
		}
		// Re-encode from the fields only: the payload moves to its own
		// slice and the frame is not reachable from p any more.
		p.Payload = bytes.Clone(p.Payload)
		p.IPOptions = bytes.Clone(p.IPOptions)
		p.ICRC = 0
		p.BTH.PadCount = 0
		if got := p.FrameLen(); got != len(f.data) {
			t.Errorf("%v: FrameLen = %d, want %d", f, got, len(f.data))
		}
		buf := make([]byte, 9000)
		for i := range buf {
			buf[i] = 0xA5 // catch bytes Encode forgets to write
		}
		n, err := p.Encode(buf)
		if err != nil {
			t.Errorf("%v: Encode: %v", f, err)
			continue
		}
		if !bytes.Equal(buf[:n], f.data) {
			t.Errorf("%v: re-encoded frame differs\n got %x\nwant %x", f, buf[:n], f.data)
		}
	}
	t.Logf("opcodes seen: %v", seen)
}

func TestCaptureErrorIsSentinel(t *testing.T) {
	frames := rxeFrames(t)
	bad := bytes.Clone(frames[0].data)
	bad[len(bad)-1] ^= 1
	var p wire.Packet
	err := p.Decode(bad)
	if !errors.Is(err, wire.ErrBadICRC) {
		t.Fatalf("Decode(corrupted ICRC) = %v, want ErrBadICRC", err)
	}
	if p.BTH.Opcode == 0 && p.SrcPort == 0 {
		t.Errorf("fields not filled in after ErrBadICRC: %+v", p)
	}
}

// TestCapturesObservedFacts pins what ROCEV2.md says rxe sends, as seen in
// the captures, so the QP engine can be byte-exact with rxe. Where the sheet
// is less precise than the packets (AckReq), the packets are asserted.
func TestCapturesObservedFacts(t *testing.T) {
	for _, f := range rxeFrames(t) {
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		info, _ := p.BTH.Opcode.Info()
		fromHost := p.SrcIP.String() == "192.0.2.1" // host_rc_pingpong.py on a kernel UDP socket
		if p.TOS != 0 || p.TTL != 64 || p.IPFlags != wire.IPv4DontFragment {
			t.Errorf("%v: TOS %d TTL %d flags %d, want 0 64 DF", f, p.TOS, p.TTL, p.IPFlags)
		}
		if fromHost {
			// Kernel UDP socket: IP ID 0 (IP_PMTUDISC_DO), real UDP
			// checksum, source port 4791.
			if p.IPID != 0 || p.UDPChecksum == 0 || p.SrcPort != wire.UDPPort {
				t.Errorf("%v: host frame ID %d checksum %#x port %d", f, p.IPID, p.UDPChecksum, p.SrcPort)
			}
		} else if p.UDPChecksum != 0 || p.SrcPort < wire.SourcePortMin {
			t.Errorf("%v: rxe frame UDP checksum %#x source port %d", f, p.UDPChecksum, p.SrcPort)
		}
		b := p.BTH
		if b.PKey != wire.DefaultPKey || b.MigReq || b.SE || b.FECN || b.BECN || b.Resv6 != 0 || b.Resv7 != 0 {
			t.Errorf("%v: BTH %+v", f, b)
		}
		// AckReq: RC requests set it on the last packet of a message
		// (LAST or ONLY) only; rxe's UC and UD QPs never set it, but QP1
		// (GSI, the RDMA-CM MADs) does. Responses never set it.
		var ack bool
		switch {
		case !info.Request:
		case info.Transport == wire.RC:
			ack = info.Pos == wire.PosLast || info.Pos == wire.PosOnly
		case info.Transport == wire.UD:
			ack = p.DETH.SrcQPN == 1
		}
		if b.AckReq != ack {
			t.Errorf("%v: %v AckReq %v, want %v", f, b.Opcode, b.AckReq, ack)
		}
		if info.Transport == wire.UD && p.DETH.SrcQPN == 1 && p.DETH.QKey != wire.GSIQKey {
			t.Errorf("%v: QP1 Q_Key %#x", f, p.DETH.QKey)
		}
	}
}
