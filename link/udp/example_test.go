//go:build linux

package udp_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/link/udp"
)

// Two links in one process: one loopback address each, one port for both
// (here a free one; 4791 in real use).
func Example() {
	a, err := udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.1"), Port: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	b, err := udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.2"), Port: int(a.LocalPort())})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	// The engine builds whole frames; the source port it must use is
	// a.Props().SrcPort.
	bufs := make([][]byte, 1)
	a.Alloc(bufs)
	f := frame(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), a.Props().SrcPort, []byte("BTH and the rest"))
	n := copy(bufs[0], f)
	if err := a.Send([][]byte{bufs[0][:n]}); err != nil {
		fmt.Println(err)
		return
	}

	frames := make([][]byte, 8)
	for range 50 {
		if k, _ := b.Receive(frames); k > 0 {
			fr := frames[0]
			fmt.Printf("%d-byte frame, IPv4 ID %d, UDP to %d: %q\n", len(fr), uint16(fr[18])<<8|uint16(fr[19]),
				uint16(fr[36])<<8|uint16(fr[37]), fr[42:])
			return
		}
		b.Wait(100 * time.Millisecond)
	}
	fmt.Println("nothing received")
	// Output:
	// 58-byte frame, IPv4 ID 0, UDP to 4791: "BTH and the rest"
}
