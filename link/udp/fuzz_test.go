//go:build linux

package udp

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// FuzzParseFrame: the frame parser behind Send never panics, and what it
// accepts is consistent: the payload lies inside the frame, after the
// addresses it reports, and the UDP length covers it.
func FuzzParseFrame(f *testing.F) {
	v4 := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00,
		0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
		0xc0, 0, 0x12, 0xb7, 0, 12, 0, 0, 1, 2, 3, 4}
	f.Add(v4)
	vlan := append(append(append([]byte{}, v4[:12]...), 0x81, 0, 0, 5), v4[12:]...)
	f.Add(vlan)
	v6 := make([]byte, 14+40+8+4)
	binary.BigEndian.PutUint16(v6[12:], 0x86dd)
	v6[14] = 0x60
	binary.BigEndian.PutUint16(v6[18:], 12)
	v6[20] = 17
	binary.BigEndian.PutUint16(v6[58:], 12)
	f.Add(v6)
	f.Add(v4[:20])
	f.Fuzz(func(t *testing.T, frame []byte) {
		ft, err := parseFrame(frame)
		if err != nil {
			if err != errFrame {
				t.Fatalf("error %v is not the package's frame error", err)
			}
			return
		}
		if len(ft.payload) > 0 {
			start := uintptr(unsafe.Pointer(&ft.payload[0])) - uintptr(unsafe.Pointer(&frame[0]))
			if start+uintptr(len(ft.payload)) > uintptr(len(frame)) {
				t.Fatalf("payload [%d, +%d) outside the %d-byte frame", start, len(ft.payload), len(frame))
			}
			hdr := 14 + 20 + 8
			if !ft.v4 {
				hdr = 14 + 40 + 8
			}
			if int(start) < hdr {
				t.Fatalf("payload starts at %d, inside the headers", start)
			}
			if ul := binary.BigEndian.Uint16(frame[start-4:]); int(ul) != 8+len(ft.payload) {
				t.Fatalf("UDP length %d, payload %d", ul, len(ft.payload))
			}
		}
	})
}
