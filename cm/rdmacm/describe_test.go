package rdmacm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestDescribeCapture runs capture.Describe (what `xdproce dump` prints)
// over the rping capture: the package's describer names each CM MAD and
// leaves the RC frames alone.
func TestDescribeCapture(t *testing.T) {
	var got []string
	eachFrame(t, "rdmacm_rping", func(_ int, fr *capture.Frame) {
		if rec := capture.Describe(fr); rec.PayloadKind != "" {
			got = append(got, rec.PayloadKind+": "+rec.Payload)
		}
	})
	want := []string{
		"rdmacm: CM REQ comm_id=0x82efb25e service_id=0x0000000001061c06 qpn=0x1e psn=0x268ac8 mtu=3 tcp 192.0.2.12:33883→192.0.2.11:7174 tid=0x000000025eb2ef82",
		"rdmacm: CM REP comm_id=0x15af5a29 remote_comm_id=0x82efb25e qpn=0x1e psn=0xf0686f tid=0x000000025eb2ef82",
		"rdmacm: CM RTU comm_id=0x82efb25e remote_comm_id=0x15af5a29 tid=0x000000025eb2ef82",
		"rdmacm: CM DREQ comm_id=0x82efb25e remote_comm_id=0x15af5a29 remote_qpn=0x1e tid=0x000000025eb2ef82",
		"rdmacm: CM DREP comm_id=0x15af5a29 remote_comm_id=0x82efb25e tid=0x000000025eb2ef82",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("described payloads (-want +got):\n%s", diff)
	}
}

// TestDescribePacket covers the describer's choices: only UD SENDs to QP1
// carrying a CM-class MAD, a malformed one named as such.
func TestDescribePacket(t *testing.T) {
	mad := encode(t, 9, &rdmacm.REJ{RemoteCommID: 0x11223344, Reason: rdmacm.RejInvalidServiceID})
	qp1 := func(payload []byte) *wire.Packet {
		return &wire.Packet{BTH: wire.BTH{Opcode: wire.UDSendOnly, DestQPN: 1}, DETH: wire.DETH{QKey: wire.GSIQKey, SrcQPN: 1}, Payload: payload}
	}
	s, ok := rdmacm.DescribePacket(qp1(mad))
	if want := "CM REJ comm_id=0x00000000 remote_comm_id=0x11223344 rejected=REQ reason=8 (invalid service ID) tid=0x0000000000000009"; !ok || s != want {
		t.Errorf("REJ: %q, %v; want %q", s, ok, want)
	}
	short := qp1(mad[:100])
	if s, ok := rdmacm.DescribePacket(short); !ok || !strings.HasPrefix(s, "CM malformed: rdmacm: decode mad: MAD is not 256 bytes") {
		t.Errorf("short MAD: %q, %v", s, ok)
	}
	other := append([]byte(nil), mad...)
	other[1] = 0x03 // SA
	if _, ok := rdmacm.DescribePacket(qp1(other)); ok {
		t.Error("an SA MAD was described as CM")
	}
	rc := qp1(mad)
	rc.BTH.Opcode = wire.RCSendOnly
	if _, ok := rdmacm.DescribePacket(rc); ok {
		t.Error("an RC SEND was described as CM")
	}
	qp2 := qp1(mad)
	qp2.BTH.DestQPN = 2
	if _, ok := rdmacm.DescribePacket(qp2); ok {
		t.Error("a UD SEND to QP2 was described as CM")
	}
}

// TestStrings checks the names the summaries use.
func TestStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{rdmacm.AttrSIDRRep.String(), "SIDR_REP"},
		{rdmacm.AttrClassPortInfo.String(), "ClassPortInfo"},
		{rdmacm.AttrID(0x1b).String(), "Attr(0x1b)"},
		{rdmacm.RejStaleConnection.String(), "stale connection"},
		{rdmacm.RejConsumerDefined.String(), "consumer defined"},
		{rdmacm.RejectReason(34).String(), "reason 34"},
		{rdmacm.MsgKind(3).String(), "reserved(3)"},
		{rdmacm.SIDRUnsupported.String(), "unsupported"},
		{rdmacm.SIDRStatus(9).String(), "status 9"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	for a := rdmacm.AttrREQ; a <= rdmacm.AttrAPR; a++ {
		if got, want := a.String(), strings.TrimPrefix(fmt.Sprintf("%T", rdmacm.NewMessage(a)), "*rdmacm."); !strings.EqualFold(strings.ReplaceAll(got, "_", ""), want) {
			t.Errorf("AttrID(%#x).String() = %q, but NewMessage gives %s", uint16(a), got, want)
		}
	}
	msgs := xdproceMessages(t)
	if got, want := msgs[len(msgs)-3].String(), "SIDR_REQ request_id=0x0badcafe service_id=0x0000000001111c06 udp [2001:db8::a]:40001→[2001:db8::b]:7174"; got != want {
		t.Errorf("SIDR_REQ summary %q, want %q", got, want)
	}
}
