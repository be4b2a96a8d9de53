package cm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
)

// TestPerftestDestCM: the client's key message of rdmacm_write_bw.pcap (frame 31, perftest
// 6.06 under rxe) parses to its fields and marshals back to the same 56 bytes; a message of
// another length, or with a QPN or PSN over 24 bits, is a protocol error.
func TestPerftestDestCM(t *testing.T) {
	wire, err := hex.DecodeString("00000000000000010000002000268167000014b100000000000055ed94a9e00000000000000000000000ffffc000020c0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	d, err := UnmarshalPerftestDestCM(wire)
	if err != nil {
		t.Fatal(err)
	}
	want := PerftestDest{OutReads: 1, QPN: 0x20, PSN: 0x268167, RKey: 0x14b1, VAddr: 0x55ed94a9e000,
		GID: GIDFromAddr(netip.MustParseAddr("::ffff:192.0.2.12")), GIDIndex: 1}
	if d != want {
		t.Fatalf("parsed %+v, want %+v", d, want)
	}
	b, err := d.MarshalCM()
	if err != nil || !bytes.Equal(b, wire) {
		t.Fatalf("marshalled % x (%v), want % x", b, err, wire)
	}
	if _, err := UnmarshalPerftestDestCM(wire[:55]); !errors.Is(err, ErrProtocol) {
		t.Errorf("55 bytes: %v", err)
	}
	bad := bytes.Clone(wire)
	bad[8] = 1 // QPN 0x01000020
	if _, err := UnmarshalPerftestDestCM(bad); !errors.Is(err, ErrProtocol) {
		t.Errorf("QPN over 24 bits: %v", err)
	}
	if _, err := (PerftestDest{PSN: 1 << 24}).MarshalCM(); err == nil {
		t.Error("PSN over 24 bits marshalled")
	}
}
