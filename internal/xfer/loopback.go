package xfer

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce"
)

// Loopback addresses of the two devices LoopbackPair makes.
var (
	LoopbackA = netip.MustParseAddr("127.0.0.1")
	LoopbackB = netip.MustParseAddr("127.0.0.2")
)

// LoopbackPair makes two devices over kernel UDP sockets (link/udp) on
// 127.0.0.1 and 127.0.0.2, port port (0: 4791): the unprivileged lab of
// `xdproce demo` and of tests. capA, when not nil, receives a pcapng capture
// of device a's frames.
func LoopbackPair(port int, capA io.Writer) (a, b *roce.Device, err error) {
	mk := func(ip netip.Addr, capture io.Writer) (*roce.Device, error) {
		l, err := udp.Open(udp.Config{Addr: ip, Port: port, MTU: 1500})
		if err != nil {
			return nil, fmt.Errorf("open udp link on %s: %w", ip, err)
		}
		return roce.NewDevice(boundedWait{l}, &roce.Options{Addrs: []netip.Addr{ip}, Capture: capture})
	}
	if a, err = mk(LoopbackA, capA); err != nil {
		return nil, nil, err
	}
	if b, err = mk(LoopbackB, nil); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// boundedWait caps the link's Wait at a few milliseconds, so that a lost
// Wake costs that much and not a hang. link/udp's Wake coalescing can lose
// a wake-up: a Wake between Wait's clearing of its flag and its draining of
// the eventfd leaves the flag set with the eventfd empty, and every later
// Wake is then skipped. (Found while writing this package; reported.)
type boundedWait struct{ link.Link }

const maxWait = 2 * time.Millisecond

func (b boundedWait) Wait(timeout time.Duration) error {
	if timeout < 0 || timeout > maxWait {
		timeout = maxWait
	}
	return b.Link.Wait(timeout)
}
