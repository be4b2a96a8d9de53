package rdmacm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// TestIPHeader writes and reads librdmacm's IP CM header for IPv4 and IPv6
// and checks its bytes: version 0, IP version in the high nibble, source
// port, IPv4 addresses in the last 4 of their 16 bytes (the rest zero, not
// ::ffff:), then the user data.
func TestIPHeader(t *testing.T) {
	user := bytes.Repeat([]byte{0xee}, rdmacm.REQUserDataMax)
	tests := []struct {
		name string
		h    rdmacm.IPHeader
		want []byte // the first 36 bytes
	}{
		{"IPv4", rdmacm.IPHeader{SrcPort: 0x845b, Src: netip.MustParseAddr("192.0.2.12"), Dst: netip.MustParseAddr("192.0.2.11")},
			append(append(append([]byte{0, 0x40, 0x84, 0x5b}, make([]byte, 12)...), 192, 0, 2, 12), append(make([]byte, 12), 192, 0, 2, 11)...)},
		{"IPv6", rdmacm.IPHeader{SrcPort: 7, Src: netip.MustParseAddr("2001:db8::a"), Dst: netip.MustParseAddr("2001:db8::b")},
			append(append([]byte{0, 0x60, 0, 7}, netip.MustParseAddr("2001:db8::a").AsSlice()...), netip.MustParseAddr("2001:db8::b").AsSlice()...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pd [rdmacm.REQPrivateDataLen]byte
			for i := range pd {
				pd[i] = 0x55 // Put must clear what it does not write
			}
			if err := tt.h.Put(pd[:], user); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pd[:rdmacm.IPHeaderLen], tt.want) || !bytes.Equal(pd[rdmacm.IPHeaderLen:], user) {
				t.Errorf("private data %x, want %x then user data", pd, tt.want)
			}
			h, u, err := rdmacm.ParseIPHeader(pd[:])
			if err != nil || h != tt.h || !bytes.Equal(u, user) {
				t.Errorf("ParseIPHeader = %+v, %x, %v", h, u, err)
			}
		})
	}
	a4, a6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	var pd [rdmacm.REQPrivateDataLen]byte
	for _, tt := range []struct {
		name string
		h    rdmacm.IPHeader
		pd   []byte
		user []byte
	}{
		{"user data 57 bytes", rdmacm.IPHeader{Src: a4, Dst: a4}, pd[:], make([]byte, 57)},
		{"mixed families", rdmacm.IPHeader{Src: a4, Dst: a6}, pd[:], nil},
		{"no addresses", rdmacm.IPHeader{}, pd[:], nil},
		{"short private data", rdmacm.IPHeader{Src: a4, Dst: a4}, pd[:35], nil},
	} {
		if err := tt.h.Put(tt.pd, tt.user); !errors.Is(err, rdmacm.ErrPrivateData) {
			t.Errorf("%s: Put = %v, want ErrPrivateData", tt.name, err)
		}
	}
	for _, tt := range []struct {
		name string
		pd   []byte
	}{
		{"short", make([]byte, 35)},
		{"CM version 1", append([]byte{1, 0x40}, make([]byte, 34)...)},
		{"IP version 5", append([]byte{0, 0x50}, make([]byte, 34)...)},
		{"IP version 0", make([]byte, 36)},
	} {
		if _, _, err := rdmacm.ParseIPHeader(tt.pd); !errors.Is(err, rdmacm.ErrPrivateData) {
			t.Errorf("%s: ParseIPHeader = %v, want ErrPrivateData", tt.name, err)
		}
	}
	// The reserved low nibble of the IP version byte is ignored, as Linux does.
	if _, _, err := rdmacm.ParseIPHeader(append([]byte{0, 0x4f}, make([]byte, 34)...)); err != nil {
		t.Errorf("IP version byte 0x4f: %v", err)
	}
}

func TestServiceID(t *testing.T) {
	if got := rdmacm.ServiceID(rdmacm.PSTCP, 7174); got != 0x0000000001061c06 {
		t.Errorf("ServiceID(TCP, 7174) = %#x", got)
	}
	if got := rdmacm.ServiceID(rdmacm.PSUDP, 0xffff); got != 0x000000000111ffff {
		t.Errorf("ServiceID(UDP, 65535) = %#x", got)
	}
	for _, tt := range []struct {
		sid  uint64
		ps   rdmacm.PortSpace
		port uint16
		ok   bool
	}{
		{0x0000000001061c06, rdmacm.PSTCP, 7174, true},
		{0x0000000001114853, rdmacm.PSUDP, 18515, true},
		{0x0000000001061c06 | 1<<40, 0, 0, false},
		{0x0000000002061c06, 0, 0, false},
		{0x1c06, 0, 0, false},
	} {
		ps, port, ok := rdmacm.ParseServiceID(tt.sid)
		if ps != tt.ps || port != tt.port || ok != tt.ok {
			t.Errorf("ParseServiceID(%#x) = %#x, %d, %v; want %#x, %d, %v", tt.sid, ps, port, ok, tt.ps, tt.port, tt.ok)
		}
	}
}

func TestTimeout(t *testing.T) {
	for _, tt := range []struct {
		code uint8
		want time.Duration
	}{
		{0, 4096 * time.Nanosecond},
		{20, 4294967296 * time.Nanosecond}, // Linux's CMA_CM_RESPONSE_TIMEOUT: about 4.3 s
		{31, 4096 << 31},
		{200, 4096 << 31},
	} {
		if got := rdmacm.Timeout(tt.code); got != tt.want {
			t.Errorf("Timeout(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
}
