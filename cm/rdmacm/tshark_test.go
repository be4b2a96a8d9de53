package rdmacm_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestTsharkDissectsOurs wraps xdproce-built CM MADs of every type into
// RoCEv2 UD SENDs to QP1 (Q_Key 0x80010000, DETH source QP 1), writes them
// as pcapng with capture's writer and has tshark dissect them: no malformed
// packet and no expert error or warning, each attribute ID and TID as
// built, and — tshark's dissector being an independent reading of the IBA
// tables — the fields it shows for REQ, REP, RTU, REJ and DREQ equal to the
// values set.
func TestTsharkDissectsOurs(t *testing.T) {
	tshark := testenv.Tool(t, "tshark", "apt-get install tshark")
	msgs := xdproceMessages(t)
	var file bytes.Buffer
	w, err := capture.NewWriter(&file, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := w.AddInterface(capture.Interface{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	frame := make([]byte, 2048)
	var wantIDs strings.Builder
	for i, m := range msgs {
		tid := 0x0000000200000000 | uint64(i)
		p := wire.Packet{
			SrcMAC: [6]byte{2, 0, 0, 0, 0, 0x0a}, DstMAC: [6]byte{2, 0, 0, 0, 0, 0x0b},
			SrcIP: a, DstIP: b, TTL: 64, IPFlags: wire.IPv4DontFragment, IPID: uint16(i),
			SrcPort: wire.UDSourcePort(1), DstPort: wire.UDPPort,
			BTH:     wire.BTH{Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQPN: 1, PSN: uint32(i)},
			DETH:    wire.DETH{QKey: wire.GSIQKey, SrcQPN: 1},
			Payload: encode(t, tid, m),
		}
		n, err := p.Encode(frame)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(id, time.Unix(1e9, int64(i)*1000), capture.DirOutbound, frame[:n]); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&wantIDs, "0x%04x|0x%016x\n", uint16(m.AttrID()), tid)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cm.pcapng")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tshark, append([]string{"-r", path}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tshark %v: %v\n%s", args, err, out)
		}
		return strings.ReplaceAll(string(out), "Running as user \"root\" and group \"root\". This could be dangerous.\n", "")
	}
	verbose := run("-V")
	for _, line := range strings.Split(verbose, "\n") {
		if strings.Contains(line, "Malformed") || strings.Contains(line, "Expert Info (Error") ||
			strings.Contains(line, "Expert Info (Warning") {
			t.Errorf("tshark: %s", strings.TrimSpace(line))
		}
	}
	if n := strings.Count(verbose, "MAD Header - Common Management Datagram"); n != len(msgs) {
		t.Errorf("tshark found %d MADs, want %d", n, len(msgs))
	}
	got := run("-T", "fields", "-E", "separator=|", "-e", "infiniband.mad.attributeid", "-e", "infiniband.mad.transactionid")
	if diff := cmp.Diff(wantIDs.String(), got); diff != "" {
		t.Errorf("tshark attribute IDs and TIDs (-want +got):\n%s", diff)
	}

	// The fields of REQ (frame 1), REP (3), RTU (4), DREQ (5), REJ (7, 8)
	// and the IPv6 REQ (13) as tshark reads them, against the values xdproceMessages sets.
	fields := func(frame string, names ...string) string {
		args := []string{"-Y", "frame.number==" + frame, "-T", "fields", "-E", "separator=|"}
		for _, n := range names {
			args = append(args, "-e", n)
		}
		return strings.TrimSpace(run(args...))
	}
	checks := []struct {
		frame, want string
		names       []string
	}{
		{"1", "0x0000000001061c06|0x020000fffe00000a|0x000011|0x04|0x04|0x14|0x00|0xabcdef|0x14|0x07|0xffff|0x03|0x07|0x0f",
			[]string{"infiniband.cm.req.serviceid", "infiniband.cm.req.localcaguid", "infiniband.cm.req.localqpn",
				"infiniband.cm.req.responderres", "infiniband.cm.req.initdepth", "infiniband.cm.req.remoteresptout",
				"infiniband.cm.req.transpsvctype", "infiniband.cm.req.startpsn", "infiniband.cm.req.localresptout",
				"infiniband.cm.req.retrcount", "infiniband.cm.req.pkey", "infiniband.cm.req.pppmtu",
				"infiniband.cm.req.rnrretrcount", "infiniband.cm.req.maxcmretr"}},
		{"1", "65535|65535|0x20|0x40|0x03|0x13|0x04|0x9c40|198.51.100.1|198.51.100.2",
			[]string{"infiniband.cm.req.prim_locallid", "infiniband.cm.req.prim_remotelid", "infiniband.cm.req.prim_tfcclass",
				"infiniband.cm.req.prim_hoplim", "infiniband.cm.req.prim_sl", "infiniband.cm.req.prim_localacktout",
				"infiniband.cm.req.ip_cm.ipv", "infiniband.cm.req.ip_cm.sport", "infiniband.cm.req.ip_cm.sip4",
				"infiniband.cm.req.ip_cm.dip4"}},
		{"3", "0x11223344|0x000012|0x123456|0x04|0x04|0x0f|0x07|0x020000fffe00000b",
			[]string{"infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn",
				"infiniband.cm.rep.respres", "infiniband.cm.rep.initdepth", "infiniband.cm.rep.tgtackdelay",
				"infiniband.cm.rep.rnrretrcount", "infiniband.cm.rep.localcaguid"}},
		{"4", "0x11223344|0x55667788", []string{"infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid"}},
		{"5", "0x11223344|0x55667788|0x000012", []string{"infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
			"infiniband.cm.req.remoteqpneecn"}},
		{"7", "0x55667788|0x11223344|0x00|0x00|0x001c", []string{"infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid",
			"infiniband.cm.rej.msgrej", "infiniband.cm.rej.rejinfolen", "infiniband.cm.rej.reason"}},
		{"8", "0x08|0x0004", []string{"infiniband.cm.rej.rejinfolen", "infiniband.cm.rej.reason"}},
		{"13", "0x06|0x9c42|2001:db8::a|2001:db8::b|0x000014", []string{"infiniband.cm.req.ip_cm.ipv", "infiniband.cm.req.ip_cm.sport",
			"infiniband.cm.req.ip_cm.sip6", "infiniband.cm.req.ip_cm.dip6", "infiniband.cm.req.localqpn"}},
	}
	for _, c := range checks {
		if got := fields(c.frame, c.names...); got != c.want {
			t.Errorf("frame %s %v:\n got %s\nwant %s", c.frame, c.names, got, c.want)
		}
	}
}
