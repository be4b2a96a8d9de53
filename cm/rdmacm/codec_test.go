package rdmacm_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// TestFieldPositions sets one field at a time and checks the bytes it lands
// in (offsets from the start of the message, i.e. MAD byte 24 + offset, as
// the IBA tables and Linux's ibta_vol1_c12.h give them) and that every
// other data byte stays zero; then that decoding gives the message back.
func TestFieldPositions(t *testing.T) {
	tests := []struct {
		name string
		m    rdmacm.Message
		want map[int]byte
	}{
		{"REQ local comm ID", &rdmacm.REQ{LocalCommID: 0x01020304}, map[int]byte{0: 1, 1: 2, 2: 3, 3: 4}},
		{"REQ vendor ID", &rdmacm.REQ{VendorID: 0xa1b2c3}, map[int]byte{5: 0xa1, 6: 0xb2, 7: 0xc3}},
		{"REQ service ID", &rdmacm.REQ{ServiceID: 0x0102030405060708}, map[int]byte{8: 1, 9: 2, 10: 3, 11: 4, 12: 5, 13: 6, 14: 7, 15: 8}},
		{"REQ CA GUID", &rdmacm.REQ{LocalCAGUID: 0xff << 56}, map[int]byte{16: 0xff}},
		{"REQ Q_Key", &rdmacm.REQ{LocalQKey: 0x80010000}, map[int]byte{28: 0x80, 29: 0x01}},
		{"REQ QPN", &rdmacm.REQ{LocalQPN: 0xabcdef}, map[int]byte{32: 0xab, 33: 0xcd, 34: 0xef}},
		{"REQ responder resources", &rdmacm.REQ{ResponderResources: 0x10}, map[int]byte{35: 0x10}},
		{"REQ local EECN", &rdmacm.REQ{LocalEECN: 0x010203}, map[int]byte{36: 1, 37: 2, 38: 3}},
		{"REQ initiator depth", &rdmacm.REQ{InitiatorDepth: 0x20}, map[int]byte{39: 0x20}},
		{"REQ remote EECN", &rdmacm.REQ{RemoteEECN: 0x040506}, map[int]byte{40: 4, 41: 5, 42: 6}},
		{"REQ remote CM response timeout", &rdmacm.REQ{RemoteCMResponseTimeout: 0x1f}, map[int]byte{43: 0xf8}},
		{"REQ transport service", &rdmacm.REQ{TransportService: rdmacm.TransportXRC}, map[int]byte{43: 0x06}},
		{"REQ E2E flow control", &rdmacm.REQ{EndToEndFlowControl: true}, map[int]byte{43: 0x01}},
		{"REQ starting PSN", &rdmacm.REQ{StartingPSN: 0x268ac8}, map[int]byte{44: 0x26, 45: 0x8a, 46: 0xc8}},
		{"REQ local CM response timeout", &rdmacm.REQ{LocalCMResponseTimeout: 20}, map[int]byte{47: 0xa0}},
		{"REQ retry count", &rdmacm.REQ{RetryCount: 5}, map[int]byte{47: 0x05}},
		{"REQ P_Key", &rdmacm.REQ{PKey: 0x8001}, map[int]byte{48: 0x80, 49: 0x01}},
		{"REQ path MTU", &rdmacm.REQ{PathMTU: 5}, map[int]byte{50: 0x50}},
		{"REQ RDC exists", &rdmacm.REQ{RDCExists: true}, map[int]byte{50: 0x08}},
		{"REQ RNR retry", &rdmacm.REQ{RNRRetryCount: 6}, map[int]byte{50: 0x06}},
		{"REQ max CM retries", &rdmacm.REQ{MaxCMRetries: 15}, map[int]byte{51: 0xf0}},
		{"REQ SRQ", &rdmacm.REQ{SRQ: true}, map[int]byte{51: 0x08}},
		{"REQ extended transport", &rdmacm.REQ{ExtendedTransport: 1}, map[int]byte{51: 0x01}},
		{"REQ primary LIDs", &rdmacm.REQ{Primary: rdmacm.Path{LocalLID: 0x0102, RemoteLID: 0x0304}}, map[int]byte{52: 1, 53: 2, 54: 3, 55: 4}},
		{"REQ primary GIDs", &rdmacm.REQ{Primary: rdmacm.Path{LocalGID: [16]byte{0: 0xfe, 15: 1}, RemoteGID: [16]byte{0: 0xfe, 15: 2}}},
			map[int]byte{56: 0xfe, 71: 1, 72: 0xfe, 87: 2}},
		{"REQ primary flow label", &rdmacm.REQ{Primary: rdmacm.Path{FlowLabel: 0xabcde}}, map[int]byte{88: 0xab, 89: 0xcd, 90: 0xe0}},
		{"REQ primary packet rate", &rdmacm.REQ{Primary: rdmacm.Path{PacketRate: 0x3f}}, map[int]byte{91: 0x3f}},
		{"REQ primary TC, hop limit", &rdmacm.REQ{Primary: rdmacm.Path{TrafficClass: 0xb8, HopLimit: 0x40}}, map[int]byte{92: 0xb8, 93: 0x40}},
		{"REQ primary SL, subnet local", &rdmacm.REQ{Primary: rdmacm.Path{SL: 0xf, SubnetLocal: true}}, map[int]byte{94: 0xf8}},
		{"REQ primary ACK timeout", &rdmacm.REQ{Primary: rdmacm.Path{LocalACKTimeout: 19}}, map[int]byte{95: 0x98}},
		{"REQ alternate path", &rdmacm.REQ{Alternate: rdmacm.Path{LocalLID: 0x0102, FlowLabel: 1, PacketRate: 1, SL: 1, LocalACKTimeout: 1}},
			map[int]byte{96: 1, 97: 2, 134: 0x10, 135: 1, 138: 0x10, 139: 0x08}},
		{"REQ SAP supported", &rdmacm.REQ{SAPSupported: true}, map[int]byte{139: 0x04}},
		{"REQ private data", &rdmacm.REQ{PrivateData: [92]byte{0: 1, 91: 2}}, map[int]byte{140: 1, 231: 2}},

		{"REP comm IDs", &rdmacm.REP{LocalCommID: 1, RemoteCommID: 2}, map[int]byte{3: 1, 7: 2}},
		{"REP Q_Key", &rdmacm.REP{LocalQKey: 0x01234567}, map[int]byte{8: 0x01, 9: 0x23, 10: 0x45, 11: 0x67}},
		{"REP QPN", &rdmacm.REP{LocalQPN: 0x123456}, map[int]byte{12: 0x12, 13: 0x34, 14: 0x56}},
		{"REP vendor ID", &rdmacm.REP{VendorID: 0xa1b2c3}, map[int]byte{15: 0xa1, 19: 0xb2, 23: 0xc3}},
		{"REP EECN", &rdmacm.REP{LocalEECN: 0x010203}, map[int]byte{16: 1, 17: 2, 18: 3}},
		{"REP starting PSN", &rdmacm.REP{StartingPSN: 0xf0686f}, map[int]byte{20: 0xf0, 21: 0x68, 22: 0x6f}},
		{"REP resources", &rdmacm.REP{ResponderResources: 1, InitiatorDepth: 2}, map[int]byte{24: 1, 25: 2}},
		{"REP target ACK delay", &rdmacm.REP{TargetACKDelay: 15}, map[int]byte{26: 0x78}},
		{"REP failover, E2E", &rdmacm.REP{FailoverAccepted: 3, EndToEndFlowControl: true}, map[int]byte{26: 0x07}},
		{"REP RNR retry, SRQ", &rdmacm.REP{RNRRetryCount: 7, SRQ: true}, map[int]byte{27: 0xf0}},
		{"REP CA GUID", &rdmacm.REP{LocalCAGUID: 0xab}, map[int]byte{35: 0xab}},
		{"REP private data", &rdmacm.REP{PrivateData: [196]byte{0: 1, 195: 2}}, map[int]byte{36: 1, 231: 2}},

		{"MRA", &rdmacm.MRA{LocalCommID: 1, RemoteCommID: 2, MessageMRAed: rdmacm.MsgOther, ServiceTimeout: 24, PrivateData: [222]byte{221: 9}},
			map[int]byte{3: 1, 7: 2, 8: 0x80, 9: 0xc0, 231: 9}},
		{"REJ", &rdmacm.REJ{LocalCommID: 1, RemoteCommID: 2, MessageRejected: rdmacm.MsgREP, ARILength: 72, Reason: rdmacm.RejStaleConnection,
			ARI: [72]byte{0: 5, 71: 6}, PrivateData: [148]byte{0: 7, 147: 8}},
			map[int]byte{3: 1, 7: 2, 8: 0x40, 9: 0x90, 11: 10, 12: 5, 83: 6, 84: 7, 231: 8}},
		{"RTU", &rdmacm.RTU{LocalCommID: 1, RemoteCommID: 2, PrivateData: [224]byte{0: 3, 223: 4}}, map[int]byte{3: 1, 7: 2, 8: 3, 231: 4}},
		{"DREQ", &rdmacm.DREQ{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 0x0a0b0c, PrivateData: [220]byte{0: 3, 219: 4}},
			map[int]byte{3: 1, 7: 2, 8: 0x0a, 9: 0x0b, 10: 0x0c, 12: 3, 231: 4}},
		{"DREP", &rdmacm.DREP{LocalCommID: 1, RemoteCommID: 2, PrivateData: [224]byte{0: 3, 223: 4}}, map[int]byte{3: 1, 7: 2, 8: 3, 231: 4}},
		{"LAP", &rdmacm.LAP{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 0x0a0b0c, RemoteCMResponseTimeout: 31,
			Alternate: rdmacm.Path{LocalLID: 0x0102, RemoteLID: 0x0304, LocalGID: [16]byte{0: 0xfe}, RemoteGID: [16]byte{15: 0xee},
				FlowLabel: 0xfffff, TrafficClass: 0x11, HopLimit: 0x22, PacketRate: 0x3f, SL: 0xf, SubnetLocal: true, LocalACKTimeout: 0x1f},
			PrivateData: [168]byte{0: 3, 167: 4}},
			map[int]byte{3: 1, 7: 2, 12: 0x0a, 13: 0x0b, 14: 0x0c, 15: 0xf8, 20: 1, 21: 2, 22: 3, 23: 4, 24: 0xfe, 55: 0xee,
				56: 0xff, 57: 0xff, 58: 0xf0, 59: 0x11, 60: 0x22, 61: 0x3f, 62: 0xf8, 63: 0xf8, 64: 3, 231: 4}},
		{"APR", &rdmacm.APR{LocalCommID: 1, RemoteCommID: 2, InfoLength: 72, Status: rdmacm.APRUnsupported, Info: [72]byte{0: 5, 71: 6},
			PrivateData: [148]byte{147: 7}}, map[int]byte{3: 1, 7: 2, 8: 72, 9: 2, 12: 5, 83: 6, 231: 7}},
		{"SIDR_REQ", &rdmacm.SIDRReq{RequestID: 1, PKey: 0xffff, ServiceID: 0x0000000001111c06, PrivateData: [216]byte{0: 3, 215: 4}},
			map[int]byte{3: 1, 4: 0xff, 5: 0xff, 12: 0x01, 13: 0x11, 14: 0x1c, 15: 0x06, 16: 3, 231: 4}},
		{"SIDR_REP", &rdmacm.SIDRRep{RequestID: 1, Status: rdmacm.SIDRNoQP, InfoLength: 72, VendorID: 0xa1b2c3, QPN: 0x0a0b0c,
			ServiceID: 0x0000000001111c06, QKey: 0x01234567, Info: [72]byte{0: 5, 71: 6}, PrivateData: [136]byte{0: 7, 135: 8}},
			map[int]byte{3: 1, 4: 3, 5: 72, 6: 0xa1, 7: 0xb2, 8: 0x0a, 9: 0x0b, 10: 0x0c, 11: 0xc3, 16: 0x01, 17: 0x11, 18: 0x1c, 19: 0x06,
				20: 0x01, 21: 0x23, 22: 0x45, 23: 0x67, 24: 5, 95: 6, 96: 7, 231: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mad := encode(t, 1, tt.m)
			for i, b := range mad[rdmacm.HeaderLen:] {
				if want := tt.want[i]; b != want {
					t.Errorf("message byte %d = %#02x, want %#02x", i, b, want)
				}
			}
			_, got, err := rdmacm.Decode(mad)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.m, got); diff != "" {
				t.Errorf("decode(encode(m)) (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHeader checks the MAD header's layout against the first REQ of the
// rping capture, and CMHeader's values.
func TestHeader(t *testing.T) {
	m := &rdmacm.RTU{LocalCommID: 1}
	h := rdmacm.CMHeader(0x000000025eb2ef82)
	h.Status, h.ClassSpecific, h.AttrMod = 0x0102, 0x0304, 0x05060708
	buf := make([]byte, 300)
	n, err := rdmacm.Encode(buf, h, m)
	if err != nil || n != rdmacm.MADLen {
		t.Fatalf("Encode = %d, %v", n, err)
	}
	want := []byte{1, 7, 2, 3, 1, 2, 3, 4, 0, 0, 0, 2, 0x5e, 0xb2, 0xef, 0x82, 0, 0x14, 0, 0, 5, 6, 7, 8}
	if diff := cmp.Diff(want, buf[:rdmacm.HeaderLen]); diff != "" {
		t.Errorf("header bytes (-want +got):\n%s", diff)
	}
	got, err := rdmacm.ParseHeader(buf[:n])
	h.AttrID = rdmacm.AttrRTU
	if err != nil || got != h {
		t.Errorf("ParseHeader = %+v, %v; want %+v", got, err, h)
	}
	var rtu rdmacm.RTU
	if _, err := rdmacm.DecodeInto(buf[:n], &rtu); err != nil || rtu != *m {
		t.Errorf("DecodeInto = %+v, %v", rtu, err)
	}
	if _, err := rdmacm.DecodeInto(buf[:n], &rdmacm.DREP{}); !errors.Is(err, rdmacm.ErrUnknownAttr) {
		t.Errorf("DecodeInto(RTU MAD, *DREP) = %v, want ErrUnknownAttr", err)
	}
}

// TestMalformed feeds MADs Linux would not hand to its CM and checks each
// gets the right sentinel (never a panic).
func TestMalformed(t *testing.T) {
	good := encode(t, 7, &rdmacm.REJ{Reason: rdmacm.RejInvalidServiceID})
	mutate := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	tests := []struct {
		name string
		mad  []byte
		want error
	}{
		{"empty", nil, rdmacm.ErrLength},
		{"short", good[:255], rdmacm.ErrLength},
		{"long", append(append([]byte(nil), good...), 0), rdmacm.ErrLength},
		{"base version 2", mutate(func(b []byte) { b[0] = 2 }), rdmacm.ErrVersion},
		{"class SA", mutate(func(b []byte) { b[1] = 0x03 }), rdmacm.ErrNotCM},
		{"class version 1", mutate(func(b []byte) { b[2] = 1 }), rdmacm.ErrVersion},
		{"method Get", mutate(func(b []byte) { b[3] = 0x01 }), rdmacm.ErrMethod},
		{"method GetResp", mutate(func(b []byte) { b[3] = 0x81 }), rdmacm.ErrMethod},
		{"ClassPortInfo", mutate(func(b []byte) { b[17] = 0x01 }), rdmacm.ErrUnknownAttr},
		{"attribute 0x1b", mutate(func(b []byte) { b[17] = 0x1b }), rdmacm.ErrUnknownAttr},
		{"REJ info length 73", mutate(func(b []byte) { b[24+9] = 73 << 1 }), rdmacm.ErrBadField},
		{"APR info length 73", mutate(func(b []byte) { b[17], b[24+8] = 0x1a, 73 }), rdmacm.ErrBadField},
		{"SIDR_REP info length 255", mutate(func(b []byte) { b[17], b[24+5] = 0x18, 255 }), rdmacm.ErrBadField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, m, err := rdmacm.Decode(tt.mad)
			if !errors.Is(err, tt.want) || m != nil {
				t.Errorf("Decode = %v, %v; want nil, %v", m, err, tt.want)
			}
		})
	}
	// Reserved bits are ignored, as Linux ignores them.
	if _, _, err := rdmacm.Decode(mutate(func(b []byte) { b[24+8] |= 0x3f })); err != nil {
		t.Errorf("REJ with reserved bits set: %v", err)
	}
}

// TestEncodeErrors checks that Encode refuses what it cannot write, naming
// the field, and never truncates a value silently.
func TestEncodeErrors(t *testing.T) {
	buf := make([]byte, rdmacm.MADLen)
	h := rdmacm.CMHeader(1)
	tests := []struct {
		name string
		buf  []byte
		h    rdmacm.Header
		m    rdmacm.Message
		want error
		msg  string
	}{
		{"short buffer", buf[:255], h, &rdmacm.RTU{}, rdmacm.ErrLength, "rdmacm: encode mad: buffer shorter than 256 bytes"},
		{"nil message", buf, h, nil, rdmacm.ErrUnknownAttr, "rdmacm: encode mad: no message"},
		{"zero header", buf, rdmacm.Header{}, &rdmacm.RTU{}, rdmacm.ErrBadField, ""},
		{"attribute mismatch", buf, rdmacm.Header{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3, AttrID: rdmacm.AttrREQ},
			&rdmacm.RTU{}, rdmacm.ErrUnknownAttr, ""},
		{"REQ QPN", buf, h, &rdmacm.REQ{LocalQPN: 1 << 24}, rdmacm.ErrBadField, "rdmacm: encode req: local QPN out of range"},
		{"REQ flow label", buf, h, &rdmacm.REQ{Primary: rdmacm.Path{FlowLabel: 1 << 20}}, rdmacm.ErrBadField,
			"rdmacm: encode req: primary flow label out of range"},
		{"REQ alternate SL", buf, h, &rdmacm.REQ{Alternate: rdmacm.Path{SL: 16}}, rdmacm.ErrBadField,
			"rdmacm: encode req: alternate SL out of range"},
		{"REQ timeout", buf, h, &rdmacm.REQ{LocalCMResponseTimeout: 32}, rdmacm.ErrBadField, ""},
		{"REP PSN", buf, h, &rdmacm.REP{StartingPSN: 1 << 24}, rdmacm.ErrBadField, "rdmacm: encode rep: starting PSN out of range"},
		{"REJ ARI length", buf, h, &rdmacm.REJ{ARILength: 73}, rdmacm.ErrBadField, ""},
		{"MRA timeout", buf, h, &rdmacm.MRA{ServiceTimeout: 32}, rdmacm.ErrBadField, ""},
		{"DREQ QPN", buf, h, &rdmacm.DREQ{RemoteQPN: 1 << 24}, rdmacm.ErrBadField, ""},
		{"LAP rate", buf, h, &rdmacm.LAP{Alternate: rdmacm.Path{PacketRate: 64}}, rdmacm.ErrBadField, ""},
		{"APR info", buf, h, &rdmacm.APR{InfoLength: 73}, rdmacm.ErrBadField, ""},
		{"SIDR_REP QPN", buf, h, &rdmacm.SIDRRep{QPN: 1 << 24}, rdmacm.ErrBadField, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := rdmacm.Encode(tt.buf, tt.h, tt.m)
			if n != 0 || !errors.Is(err, tt.want) {
				t.Fatalf("Encode = %d, %v; want 0, %v", n, err, tt.want)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("error %q, want %q", err, tt.msg)
			}
		})
	}
}

// TestNoAllocs checks that DecodeInto and Encode allocate nothing.
func TestNoAllocs(t *testing.T) {
	msgs := xdproceMessages(t)
	mads := make([][]byte, len(msgs))
	into := make([]rdmacm.Message, len(msgs))
	for i, m := range msgs {
		mads[i] = encode(t, 1, m)
		into[i] = rdmacm.NewMessage(m.AttrID())
	}
	buf := make([]byte, rdmacm.MADLen)
	h := rdmacm.CMHeader(1)
	allocs := testing.AllocsPerRun(100, func() {
		for i := range msgs {
			if _, err := rdmacm.DecodeInto(mads[i], into[i]); err != nil {
				t.Fatal(err)
			}
			if _, err := rdmacm.Encode(buf, h, into[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decode+encode of every message, want 0", allocs)
	}
}
