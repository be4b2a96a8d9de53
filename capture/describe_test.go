package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/roce/wire"
)

// goldenFrameBytes returns the encoded frames of the golden file name.
func goldenFrameBytes(t testing.TB, name string) [][]byte {
	t.Helper()
	for _, gf := range goldenFiles() {
		if gf.name != name {
			continue
		}
		var out [][]byte
		for _, f := range gf.frames {
			buf := make([]byte, 9000)
			n, err := f.pkt.Encode(buf)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, buf[:n])
		}
		return out
	}
	t.Fatalf("no golden file %q", name)
	return nil
}

func describeBytes(b []byte) *Record {
	return Describe(&Frame{Data: b, LinkType: LinkTypeEthernet, Index: 1})
}

// TestDescribeRxeCaptures: every RoCE frame of the real rxe captures decodes
// with a good ICRC, and the opcode names agree with tshark's summary in
// SUMMARY.txt for a few known captures.
func TestDescribeRxeCaptures(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/rxe/*.pcap")
	if len(paths) < 10 {
		t.Fatalf("rxe captures missing from testdata/rxe: %q", paths)
	}
	total := 0
	ops := map[string]int{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var f Frame
		for {
			if err := r.Next(&f); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			rec := Describe(&f)
			if !rec.RoCE {
				if rec.Summary == "" || !strings.HasPrefix(rec.Summary, "non-RoCE ") {
					t.Errorf("%s #%d: non-RoCE frame without summary: %q", p, f.Index, rec.Summary)
				}
				continue
			}
			total++
			if rec.Bad() {
				t.Errorf("%s #%d: %s", p, f.Index, rec)
			}
			ops[rec.BTH.Opcode]++
		}
	}
	if total < 300 {
		t.Errorf("only %d RoCE frames in the rxe captures", total)
	}
	for _, op := range []string{"RC_SEND_ONLY", "RC_ACKNOWLEDGE", "RC_RDMA_WRITE_ONLY", "RC_RDMA_READ_REQUEST",
		"RC_COMPARE_SWAP", "RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE", "UD_SEND_ONLY", "UC_SEND_ONLY"} {
		if ops[op] == 0 {
			t.Errorf("no %s frame described in the rxe captures (opcodes seen: %v)", op, ops)
		}
	}
}

func TestDescribeAETH(t *testing.T) {
	tests := []struct {
		syndrome uint8
		typ      string
		meaning  string
		text     string
	}{
		{0x1F, "ACK", "credits unlimited", "aeth ACK credits unlimited msn 7"},
		{0x05, "ACK", "credits 5", "aeth ACK credits 5 msn 7"},
		{0x2C, "RNR_NAK", "timer 0.64ms", "aeth RNR timer 0.64ms msn 7"},
		{0x20, "RNR_NAK", "timer 655.36ms", "aeth RNR timer 655.36ms msn 7"},
		{0x3F, "RNR_NAK", "timer 491.52ms", "aeth RNR timer 491.52ms msn 7"},
		{0x60, "NAK", "PSN sequence error", "aeth NAK PSN sequence error msn 7"},
		{0x61, "NAK", "invalid request", "aeth NAK invalid request msn 7"},
		{0x62, "NAK", "remote access error", "aeth NAK remote access error msn 7"},
		{0x63, "NAK", "remote operational error", "aeth NAK remote operational error msn 7"},
		{0x64, "NAK", "invalid RD request", "aeth NAK invalid RD request msn 7"},
		{0x65, "NAK", "reserved NAK code 5", "aeth NAK reserved NAK code 5 msn 7"},
		{0x40, "reserved", "reserved syndrome 0x40", "aeth reserved reserved syndrome 0x40 msn 7"},
	}
	for _, tt := range tests {
		p := wire.Packet{
			SrcIP: hostB.ip, DstIP: hostA.ip, SrcPort: 50000, DstPort: wire.UDPPort, TTL: 64,
			BTH:  wire.BTH{Opcode: wire.RCAck, PKey: 0xFFFF, DestQPN: 0x11, PSN: 5},
			AETH: wire.AETH{Syndrome: tt.syndrome, MSN: 7},
		}
		buf := make([]byte, 256)
		n, err := p.Encode(buf)
		if err != nil {
			t.Fatal(err)
		}
		rec := describeBytes(buf[:n])
		if rec.AETH == nil || rec.AETH.Type != tt.typ || rec.AETH.Meaning != tt.meaning || rec.AETH.Syndrome != tt.syndrome {
			t.Errorf("syndrome %#x: %+v, want %s %q", tt.syndrome, rec.AETH, tt.typ, tt.meaning)
		}
		if s := rec.String(); !strings.Contains(s, " "+tt.text+" icrc ok") {
			t.Errorf("syndrome %#x: %q does not contain %q", tt.syndrome, s, tt.text)
		}
	}
}

// TestDescribeJSON pins the JSON field names of schema 1 on golden frames.
func TestDescribeJSON(t *testing.T) {
	frames := goldenFrameBytes(t, "rc_write")
	rec := describeBytes(frames[0]) // RC_RDMA_WRITE_FIRST
	got, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"index":1,"time":"0001-01-01T00:00:00Z","len":330,"roce":true,"ip_version":4,` +
		`"src":"198.51.100.1:49458","dst":"198.51.100.2:4791",` +
		`"bth":{"opcode":"RC_RDMA_WRITE_FIRST","opcode_num":6,"dest_qpn":18,"psn":200,"ack_req":false,"se":false,"mig_req":false,"pad_count":0,"pkey":65535,"fecn":false,"becn":false},` +
		`"reth":{"va":"0x00007f3a5c001000","rkey":1522786775,"dma_len":612},` +
		`"payload_len":256,"icrc":{"value":` + jsonU32(rec.ICRC.Value) + `,"want":` + jsonU32(rec.ICRC.Value) + `,"ok":true}}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	// Every extension header's field names.
	for name, wantSub := range map[string][]string{
		"rc_atomic": {`"atomic_eth":{"va":"0x00007f3a5c001008","rkey":1522786775,"swap_add":"0x1111222233334444","compare":"0x0000000000000000"}`},
		"ud_send":   {`"deth":{"qkey":286331153,"src_qpn":19}`},
		"rc_send":   {`"imm_dt":305419896`, `"ieth_rkey":195939070`},
		"vlan":      {`"vlan_tci":24676`},
		"ooo-frames": {
			`"ooo":{"ctx":"0x000101/k3","ctx_id":257,"ctx_key":3,"tid":7,"total":4096,"initiator":"0x000202/k5","initiator_id":514,"notify":"initiator","seg":1024,"tag":3735928559,"index":2,"offset":2048,"len":1024}`,
			`"ooo":{"ctx":"0x000202/k5","ctx_id":514,"ctx_key":5,"tid":7,"total":4096,"initiator":"0x000101/k3","initiator_id":257,"notify":"initiator","tag":3735928559,"status":"ok"}`,
			`"sink_va":"0x00007f3a5d000000","sink_rkey":464367618}`,
			`"target":{"gid":"198.51.100.3","qpn":19,"ctx":"0x000301/k2"},"controller":{"gid":"198.51.100.1","qpn":17,"ctx":"0x000204/k5"}}`,
			`"reth":{"va":"0x00007f3a5c001800","rkey":1522786775,"dma_len":1024}`,
		},
	} {
		var all strings.Builder
		for _, f := range goldenFrameBytes(t, name) {
			b, _ := json.Marshal(describeBytes(f))
			all.Write(b)
		}
		for _, w := range wantSub {
			if !strings.Contains(all.String(), w) {
				t.Errorf("%s: JSON lacks %s", name, w)
			}
		}
	}
	ackFrames := goldenFrameBytes(t, "rc_atomic")
	b, _ := json.Marshal(describeBytes(ackFrames[3]))
	for _, w := range []string{`"aeth":{"syndrome":31,"type":"ACK","value":31,"meaning":"credits unlimited","msn":2}`, `"atomic_ack_eth":{"orig":"0x00000000000000ff"}`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("atomic ack JSON %s lacks %s", b, w)
		}
	}
}

func jsonU32(v uint32) string { b, _ := json.Marshal(v); return string(b) }

func TestDescribeBadFrames(t *testing.T) {
	good := goldenFrameBytes(t, "rc_send")[4] // RC_SEND_ONLY, 64 bytes of payload
	if rec := describeBytes(good); rec.Bad() {
		t.Fatalf("good frame: %s", rec)
	}

	flipped := bytes.Clone(good)
	flipped[len(flipped)-10] ^= 0x80 // a payload byte
	rec := describeBytes(flipped)
	if !rec.Bad() || rec.ICRC == nil || rec.ICRC.OK || rec.Error != "" || rec.BTH == nil || rec.BTH.Opcode != "RC_SEND_ONLY" {
		t.Errorf("flipped payload: %s (%+v)", rec, rec.ICRC)
	}
	if s := rec.String(); !strings.Contains(s, "icrc BAD 0x") || !strings.Contains(s, " want 0x") {
		t.Errorf("flipped payload text %q", s)
	}

	// Cut inside the payload, with the IP length fixed so it is the BTH
	// that comes up short: a decode error, but the BTH is still shown.
	cut := bytes.Clone(good[:14+20+8+12+2])
	binary.BigEndian.PutUint16(cut[16:], uint16(len(cut)-14))
	binary.BigEndian.PutUint16(cut[14+20+4:], uint16(len(cut)-14-20))
	rec = describeBytes(cut)
	if !rec.Bad() || rec.Error == "" || rec.BTH == nil || rec.BTH.DestQPN != 0x12 {
		t.Errorf("truncated RoCE frame: %s", rec)
	}
	if s := rec.String(); !strings.Contains(s, "RC_SEND_ONLY qpn 0x000012") || !strings.Contains(s, "decode error: wire: ") {
		t.Errorf("truncated RoCE frame text %q", s)
	}

	// A bad IPv4 header checksum is reported as an error, fields intact.
	badsum := bytes.Clone(good)
	badsum[14+10] ^= 0xFF
	rec = describeBytes(badsum)
	if !rec.Bad() || !strings.Contains(rec.Error, "checksum") || rec.BTH == nil {
		t.Errorf("bad IPv4 checksum: %s", rec)
	}

	// Unknown opcode.
	unk := bytes.Clone(good)
	unk[14+20+8] = 0x1F
	rec = describeBytes(unk)
	if !rec.Bad() || !strings.Contains(rec.Error, "opcode") {
		t.Errorf("unknown opcode: %s", rec)
	}
}

func TestDescribeNonRoCE(t *testing.T) {
	eth := func(et uint16, rest ...byte) []byte {
		b := make([]byte, 14, 14+len(rest))
		binary.BigEndian.PutUint16(b[12:], et)
		return append(b, rest...)
	}
	ipv4 := func(proto byte, l4 ...byte) []byte {
		h := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2}
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
		return append(h, l4...)
	}
	ipv6 := func(next byte, l4 ...byte) []byte {
		h := make([]byte, 40)
		h[0] = 0x60
		binary.BigEndian.PutUint16(h[4:], uint16(len(l4)))
		h[6], h[7] = next, 64
		copy(h[8:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
		copy(h[24:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
		return append(h, l4...)
	}
	tcp := []byte{0x48, 0x53, 0xC3, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x02, 0, 0, 0, 0, 0, 0}
	tests := []struct {
		name  string
		frame []byte
		link  LinkType
		want  string
	}{
		{"arp", eth(0x0806, make([]byte, 28)...), 1, "non-RoCE ARP"},
		{"tcp", eth(0x0800, ipv4(6, tcp...)...), 1, "non-RoCE IPv4 TCP 192.0.2.1:18515 → 192.0.2.2:50000"},
		{"udp other port", eth(0x0800, ipv4(17, 0x12, 0x34, 0x00, 0x35, 0, 8, 0, 0)...), 1, "non-RoCE IPv4 UDP 192.0.2.1:4660 → 192.0.2.2:53"},
		{"icmpv6", eth(0x86DD, ipv6(58, 128, 0, 0, 0)...), 1, "non-RoCE IPv6 ICMPv6 2001:db8::1 → 2001:db8::2"},
		{"unknown ethertype", eth(0x1234), 1, "non-RoCE ethertype 0x1234"},
		{"runt", []byte{1, 2, 3}, 1, "non-RoCE runt frame (3 bytes)"},
		{"short ip", eth(0x0800, 0x45, 0), 1, "non-RoCE frame: IPv4 header truncated"},
		{"ip version", eth(0x0800, append([]byte{0x55}, make([]byte, 19)...)...), 1, "non-RoCE frame: IPv4 ethertype, IP version 5"},
		{"ihl", eth(0x0800, append([]byte{0x44}, ipv4(17)[1:]...)...), 1, "non-RoCE IPv4 UDP 192.0.2.1 → 192.0.2.2 (bad IPv4 header length 16)"},
		{"qinq", eth(0x88A8, 0, 100, 0x81, 0x00, 0, 200, 0x08, 0x00), 1, "non-RoCE 802.1ad (QinQ)"},
		{"two tags", eth(0x8100, 0, 100, 0x81, 0x00, 0, 200, 0x08, 0x00), 1, "non-RoCE frame: stacked VLAN tags"},
		{"vlan cut", eth(0x8100, 0, 100), 1, "non-RoCE frame: 802.1Q tag truncated"},
		{"short tcp", eth(0x0800, ipv4(6, 0x48)...), 1, "non-RoCE IPv4 TCP 192.0.2.1 → 192.0.2.2 (truncated)"},
		{"linux cooked", make([]byte, 40), 113, "non-Ethernet link type 113"},
	}
	for _, tt := range tests {
		rec := Describe(&Frame{Data: tt.frame, LinkType: tt.link})
		if rec.RoCE || rec.Summary != tt.want || rec.Bad() {
			t.Errorf("%s: roce=%v summary %q, want %q", tt.name, rec.RoCE, rec.Summary, tt.want)
		}
	}
}

func TestPayloadDescriber(t *testing.T) {
	const magic = "TEST"
	RegisterPayloadDescriber("test", func(p *wire.Packet) (string, bool) {
		if len(p.Payload) < 8 || string(p.Payload[:4]) != magic {
			return "", false
		}
		return "TEST_MSG size " + strconv.Itoa(int(binary.BigEndian.Uint32(p.Payload[4:]))), true
	})
	p := wire.Packet{
		SrcIP: hostA.ip, DstIP: hostB.ip, SrcPort: 50000, DstPort: wire.UDPPort, TTL: 64,
		BTH:     wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQPN: 0x12, PSN: 1, AckReq: true},
		Payload: []byte{'T', 'E', 'S', 'T', 0, 0, 0x20, 0},
	}
	buf := make([]byte, 256)
	n, _ := p.Encode(buf)
	rec := describeBytes(buf[:n])
	if rec.Payload != "TEST_MSG size 8192" || rec.PayloadKind != "test" {
		t.Errorf("payload %q kind %q", rec.Payload, rec.PayloadKind)
	}
	if s := rec.String(); !strings.Contains(s, "payload 8 [TEST_MSG size 8192] icrc ok") {
		t.Errorf("text %q", s)
	}
	// Other payloads are left alone.
	if rec := describeBytes(goldenFrameBytes(t, "rc_send")[4]); rec.Payload != "" {
		t.Errorf("unrelated payload described as %q", rec.Payload)
	}
}

func TestFilter(t *testing.T) {
	var recs []*Record
	for _, name := range []string{"rc_send", "rc_ack_nak", "rc_read", "ud_send"} {
		for _, f := range goldenFrameBytes(t, name) {
			recs = append(recs, describeBytes(f))
		}
	}
	nonRoCE := &Record{Summary: "non-RoCE ARP"}
	recs = append(recs, nonRoCE)
	count := func(expr string) int {
		f, err := ParseFilter(expr)
		if err != nil {
			t.Fatalf("ParseFilter(%q): %v", expr, err)
		}
		n := 0
		for _, r := range recs {
			if f.Match(r) {
				n++
			}
		}
		return n
	}
	tests := []struct {
		expr string
		want int
	}{
		{"", 13 + 16 + 6 + 2 + 1},
		{"roce", 13 + 16 + 6 + 2},
		{"nak", 6},
		{"rnr", 2},
		{"ack", 2 + 2 + 3}, // ACKs in rc_send and rc_ack_nak, READ responses FIRST/LAST/ONLY
		{"op=RC_SEND_ONLY", 2 + 7},
		{"op=rc_send_only*", 2 + 7 + 1 + 1}, // + WITH_IMMEDIATE, WITH_INVALIDATE
		{"op=0x04", 2 + 7},
		{"op=*READ*", 6},
		{"qpn=0x14", 2},
		{"qpn=20", 2},
		{"psn=0x192", 5},
		{"nak and psn=402", 3},
		{"nak, not rnr", 4},
		{"nak and !rnr", 4},
		{"op=RC_ACKNOWLEDGE and not nak", 2 + 2},
		{"src=198.51.100.2", 2 + 8 + 4},
		{"dst=198.51.100.2 and op=UD_*", 2},
		{"ip=::ffff:198.51.100.1", 13 + 16 + 6 + 2},
		{"bad", 0},
		{"dir=in", 0}, // describeBytes records carry no direction
	}
	for _, tt := range tests {
		if got := count(tt.expr); got != tt.want {
			t.Errorf("filter %q matches %d frames, want %d", tt.expr, got, tt.want)
		}
	}
	// The OOO frames: one of each opcode.
	ooo := len(recs)
	for _, f := range goldenFrameBytes(t, "ooo-frames") {
		recs = append(recs, describeBytes(f))
	}
	for _, tt := range []struct {
		expr string
		want int
	}{
		{"ooo", 5},
		{"op=OOO_*", 5},
		{"op=0xc2", 1},
		{"op=OOO_3P_*", 2},
		{"ooo and op=*READ*", 2},
		{"tid=7", 2},     // the OOO_WRITE and its completion
		{"ctx=0x101", 2}, // the OOO_WRITE's context, and the completion's initiator
		{"ctx=0x000202 and tid=7", 2},
		{"ctx=257, not op=OOO_COMPLETION", 1},
		{"ooo and qpn=0x11", 2},
		{"not ooo", ooo - 1}, // every RoCE frame above but the OOO ones
	} {
		if got := count(tt.expr); got != tt.want {
			t.Errorf("filter %q matches %d frames, want %d", tt.expr, got, tt.want)
		}
	}
	for _, bad := range []string{"qpn", "qpn=", "qpn=x", "qpn=0x1000000", "op=[", "dir=up", "bogus", "and nak", "nak and", "nak nak", "ip=300.1.1.1", "roce=1", "not",
		"ooo=1", "ctx", "ctx=0x1000000", "tid=", "tid=0x100000000", "tid=-1"} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("ParseFilter(%q) succeeded", bad)
		}
	}
}

func FuzzDescribe(f *testing.F) {
	for _, name := range []string{"rc_send", "rc_atomic", "ud_send", "ipv6", "vlan", "ooo-frames"} {
		for _, b := range goldenFrameBytes(f, name) {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := describeBytes(data)
		_ = rec.String()
		if _, err := json.Marshal(rec); err != nil {
			t.Fatal(err)
		}
		if !rec.RoCE && rec.Summary == "" {
			t.Fatalf("non-RoCE frame without a summary")
		}
	})
}

func BenchmarkDescribe(b *testing.B) {
	frame := goldenFrameBytes(b, "rc_write")[0]
	f := &Frame{Data: frame, LinkType: LinkTypeEthernet}
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	var line []byte
	for b.Loop() {
		line = Describe(f).AppendText(line[:0])
	}
}

// TestDescribeSnapped: a RoCE frame cut by the capture's snapshot length says
// so, and cannot pass --verify.
func TestDescribeSnapped(t *testing.T) {
	frame := goldenFrameBytes(t, "rc_write")[0]
	rec := Describe(&Frame{Data: frame[:96], OrigLen: len(frame), LinkType: LinkTypeEthernet, Index: 3})
	if rec.OrigLen != len(frame) || !rec.Bad() {
		t.Errorf("snapped frame: %+v", rec)
	}
	if s := rec.String(); !strings.Contains(s, "3 00:00:00.000000000 (captured 96 of 330 bytes) 198.51.100.1:49458 → 198.51.100.2:4791 RC_RDMA_WRITE_FIRST") {
		t.Errorf("snapped frame text %q", s)
	}
	if rec := Describe(&Frame{Data: frame, OrigLen: len(frame), LinkType: LinkTypeEthernet}); rec.OrigLen != 0 || rec.Bad() {
		t.Errorf("whole frame: %+v", rec)
	}
}

// TestDescribeOOOBad: an OOO frame whose headers disagree (the RETH length
// is not the payload's) is shown with its opcode and the reason, and fails
// --verify; so is one whose ICRC is wrong.
func TestDescribeOOOBad(t *testing.T) {
	frame := bytes.Clone(goldenFrameBytes(t, "ooo-frames")[0]) // OOO_WRITE, 1024 bytes
	const reth = 14 + 20 + 8 + 12
	binary.BigEndian.PutUint32(frame[reth+12:], 1000)
	if err := wire.SetICRC(frame); err != nil {
		t.Fatal(err)
	}
	rec := describeBytes(frame)
	if !rec.Bad() || rec.BTH == nil || rec.BTH.Opcode != "OOO_WRITE" || !strings.Contains(rec.Error, "decode ooo: payload length differs from the RETH DMA length") {
		t.Errorf("inconsistent OOO_WRITE: %s", rec)
	}
	if s := rec.String(); !strings.Contains(s, "OOO_WRITE qpn 0x000012 psn 0x000002 decode error: wire: decode ooo:") {
		t.Errorf("text: %s", s)
	}
	frame = bytes.Clone(goldenFrameBytes(t, "ooo-frames")[1]) // OOO_COMPLETION
	frame[len(frame)-1] ^= 1
	if rec := describeBytes(frame); !rec.Bad() || rec.OOO == nil || rec.ICRC == nil || rec.ICRC.OK ||
		!strings.Contains(rec.String(), "OOO_COMPLETION qpn 0x000011 ctx=0x000202/k5 tid=7 total=4096 status=ok") {
		t.Errorf("OOO_COMPLETION with a bad ICRC: %s", rec)
	}
}
