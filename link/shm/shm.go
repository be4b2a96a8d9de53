package shm

import (
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/link"
)

// Defaults for the zero values of Config.
const (
	// DefaultMTU carries RoCE frames of path MTU 4096 (4096 bytes of
	// payload plus RoCE, UDP, IP and Ethernet headers fit in MTU+18).
	DefaultMTU = 4200
	// DefaultRing is the number of descriptors of each direction's ring.
	DefaultRing = 256
)

// Limits of Config.
const (
	MinMTU     = 68
	MaxMTU     = 65000
	MaxRing    = 1 << 15
	MaxBuffers = 1 << 15
)

// Config describes a port.
type Config struct {
	// MTU is the L3 MTU (MinMTU..MaxMTU); frames are at most MTU+18 bytes.
	// 0 means DefaultMTU.
	MTU int
	// Ring is the number of frames each direction's ring holds, counting
	// those the receiver's last Receive still lends (they keep their
	// positions until its next Receive): a power of two in 2..MaxRing. 0
	// means DefaultRing.
	Ring int
	// Buffers is the number of transmit buffers each end's Alloc hands out
	// at most at once (1..MaxBuffers). 0 means Ring. Each direction's frame
	// area has Ring+Buffers slots: those queued in the ring or still lent by
	// the receiver's last Receive, and those the sender holds, so Alloc
	// never waits for the receiver.
	Buffers int
}

// resolve fills in the defaults and checks the limits.
func (c Config) resolve() (Config, error) {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.Ring == 0 {
		c.Ring = DefaultRing
	}
	if c.Buffers == 0 {
		c.Buffers = c.Ring
	}
	switch {
	case c.MTU < MinMTU || c.MTU > MaxMTU:
		return c, fmt.Errorf("MTU %d not in %d..%d", c.MTU, MinMTU, MaxMTU)
	case c.Ring < 2 || c.Ring > MaxRing || c.Ring&(c.Ring-1) != 0:
		return c, fmt.Errorf("ring of %d frames: want a power of two in 2..%d", c.Ring, MaxRing)
	case c.Buffers < 1 || c.Buffers > MaxBuffers:
		return c, fmt.Errorf("%d transmit buffers not in 1..%d", c.Buffers, MaxBuffers)
	}
	return c, nil
}

// Stats counts what one end did. Everything read from the shared memory
// that fails validation is dropped and counted here.
type Stats struct {
	Sent     uint64 // frames queued to the peer
	Received uint64 // frames handed out by Receive
	Overflow uint64 // frames dropped by Send: the ring to the peer was full
	Wakeups  uint64 // eventfd signals sent to a sleeping peer
	// BadDescs counts descriptors from the peer dropped for an offset
	// outside the frame area or not at a slot, or a length under 14 bytes or
	// over MaxFrame.
	BadDescs uint64
	// BadIndexes counts the times an index the peer owns (its ring's tail,
	// or the head of the ring we fill) was out of range: behind what it had
	// already published, or more than the ring size ahead. The index is
	// ignored until it is sane again.
	BadIndexes uint64
}

// PortFds are the file descriptors that make up a port for the attaching
// end: the memfd holding the rings and frames, the eventfd the creator
// signals when it sends (Down), the one the attacher signals (Up), and the
// attacher's end of the liveness socket pair (Live). A negative value is
// an absent descriptor.
type PortFds struct {
	Mem, Down, Up, Live int
}

func (p *PortFds) list() [4]*int { return [4]*int{&p.Mem, &p.Down, &p.Up, &p.Live} }

// ErrPeerGone is returned by Wait, Nap and Send once the other end has
// closed its Link or its process has exited, and nothing is left to receive.
// It matches link.ErrClosed (errors.Is), so an engine loop that ends on
// ErrClosed ends on it too.
var ErrPeerGone error = peerGone{}

type peerGone struct{}

func (peerGone) Error() string        { return "shm: peer gone" }
func (peerGone) Is(target error) bool { return target == link.ErrClosed }

// Errors returned by Send (wrapping none of the link sentinels).
var (
	errForeign = errors.New("shm: send: buffer not from this link's Alloc, or already handed back")
	errRunt    = errors.New("shm: send: frame shorter than an Ethernet header")
)
