package pipe

import (
	"encoding/binary"
	"testing"
)

// TestMarkCE: ECT(0) and ECT(1) IPv4 (with and without a VLAN tag) and
// IPv6 frames become CE with a valid IPv4 checksum; not-ECT, CE and non-IP
// frames are left as they are.
func TestMarkCE(t *testing.T) {
	v4 := func(tos byte, vlan bool) []byte {
		f := make([]byte, 14, 64)
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		if vlan {
			binary.BigEndian.PutUint16(f[12:], 0x8100)
			f = append(f, 0, 5, 0x08, 0x00)
		}
		ip := []byte{0x45, tos, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2}
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		return append(append(f, ip...), make([]byte, 8)...)
	}
	v6 := func(tc byte) []byte {
		f := make([]byte, 14+48)
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		binary.BigEndian.PutUint32(f[14:], 6<<28|uint32(tc)<<20)
		return f
	}
	checksumOK := func(ip []byte) bool {
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		return sum == 0xffff
	}
	for _, tc := range []struct {
		name    string
		f       []byte
		ipOff   int
		want    bool
		wantTOS byte
	}{
		{"ipv4 ECT(0)", v4(0xC2, false), 14, true, 0xC3},
		{"ipv4 ECT(1) vlan", v4(0x01, true), 18, true, 0x03},
		{"ipv4 not ECT", v4(0xC0, false), 14, false, 0xC0},
		{"ipv4 CE already", v4(0x03, false), 14, false, 0x03},
		{"ipv6 ECT(0)", v6(0x02), 14, true, 0x03},
		{"ipv6 not ECT", v6(0xB8), 14, false, 0xB8},
	} {
		got := markCE(tc.f)
		ip := tc.f[tc.ipOff:]
		tos := ip[1]
		if ip[0]>>4 == 6 {
			tos = byte(binary.BigEndian.Uint32(ip) >> 20)
		}
		if got != tc.want || tos != tc.wantTOS {
			t.Errorf("%s: marked %v, TOS %#x; want %v, %#x", tc.name, got, tos, tc.want, tc.wantTOS)
		}
		if ip[0]>>4 == 4 && !checksumOK(ip[:20]) {
			t.Errorf("%s: IPv4 checksum wrong after marking", tc.name)
		}
	}
	if markCE([]byte{1, 2, 3}) || markCE(make([]byte, 14)) {
		t.Error("marked a frame that is not IP")
	}
}
