package link

import (
	"errors"
	"net"
	"time"
)

// A Link moves batches of whole Ethernet frames.
type Link interface {
	// Receive stores up to len(frames) received frames in frames without
	// blocking and returns how many. They alias link-owned memory, valid until
	// the next Receive call.
	Receive(frames [][]byte) (int, error)
	// Alloc stores up to len(bufs) empty transmit buffers (len == MaxFrame) in
	// bufs and returns how many. The caller writes frames into them and passes
	// them, resliced to the frame length, to Send. Buffers not sent must be
	// handed back with Free.
	Alloc(bufs [][]byte) int
	// Send queues frames for transmission; ownership of the buffers returns to
	// the link whatever the result.
	Send(frames [][]byte) error
	// Free hands unsent buffers from Alloc back to the link.
	Free(bufs [][]byte)
	// Wait blocks until a frame may be received, Wake is called, or the
	// timeout passes (a negative timeout waits without limit).
	Wait(timeout time.Duration) error
	// Wake makes a concurrent or the next Wait return at once. Safe for
	// concurrent use.
	Wake()
	// Props describes the link.
	Props() Props
	// Close releases the link. Safe for concurrent use; later calls return
	// ErrClosed.
	Close() error
}

// A Napper is a Link that can sleep without being woken by each arriving
// frame. Nap blocks until Wake is called or the timeout passes (a negative
// timeout waits without limit); frames that arrive meanwhile wait in the
// link's receive queue, which must hold what arrives in the timeout. A link
// may return early when frames arrive (Nap may be Wait). The roce engine
// naps instead of waiting while it receives a stream of frames, so that it
// is woken once per batch rather than once or twice a frame: receive
// coalescing, as a NIC's interrupt moderation (ethtool -C rx-usecs).
type Napper interface {
	Nap(timeout time.Duration) error
}

// Nap is l's Nap if it is a Napper, else its Wait.
func Nap(l Link, timeout time.Duration) error {
	if n, ok := l.(Napper); ok {
		return n.Nap(timeout)
	}
	return l.Wait(timeout)
}

// An ICRCChecker is a Link that verifies the RoCEv2 ICRC of received
// frames itself, because it computes it anyway (link/udp, to recover the
// IPv4 Identification the kernel hides). ICRCChecked reports whether frame
// i of the last Receive (its index in the slice Receive filled) had its
// ICRC found right over exactly the bytes returned; the roce engine then
// does not compute it a second time. A link reports false for every frame it
// did not check, and a wrapper that changes frames must not pass it on.
type ICRCChecker interface {
	ICRCChecked(i int) bool
}

// ICRCChecked is l's ICRCChecked if it is an ICRCChecker, else false.
func ICRCChecked(l Link, i int) bool {
	c, ok := l.(ICRCChecker)
	return ok && c.ICRCChecked(i)
}

// A Splitter is a Link made of independent queues (link/xsk's MultiQueue:
// one AF_XDP socket per rx queue, each with its own buffers) that can be
// shared out among several goroutines. Split(n) returns n links, each
// serving its share of the queues: its Receive, Alloc, Send, Free, Wait, Nap
// and Wake touch only that share, so each part may be driven by a goroutine
// of its own. The Splitter stays the owner: its Close closes every part, and
// after Split only the parts are used for I/O. n must be between 1 and
// Queues().
type Splitter interface {
	Link
	Queues() int
	Split(n int) ([]Link, error)
}

// Props describes a Link.
type Props struct {
	// Name says what carries the frames: "AF_XDP (native)", "AF_XDP
	// (generic)", "UDP", "shm", "pipe".
	Name string
	// MTU is the L3 MTU of the path; frames are at most MTU+18 bytes.
	MTU int
	// MaxFrame is the size of one transmit buffer.
	MaxFrame int
	// HWAddr is the link's MAC address; nil where there is none (UDP, pipe).
	HWAddr net.HardwareAddr
	// SrcPort, when non-zero, is the UDP source port every frame leaves from
	// (link/udp: 4791). The engine encodes frames with it so that the ICRC
	// matches what is sent.
	SrcPort uint16
	// SyntheticHeaders reports that the Ethernet and IP headers of received
	// frames are rebuilt by the link: fields the ICRC does not cover (MAC
	// addresses, TTL) are not the sender's. The link restores what the
	// ICRC covers (link/udp recovers the IPv4 Identification from the ICRC)
	// and the TOS, whose ECN bits congestion control reads (link/udp reads
	// it with IP_RECVTOS).
	SyntheticHeaders bool
}

// ErrNotSupported is returned (wrapped) when a link or one of its features is
// not available on this kernel or device.
var ErrNotSupported = errors.New("not supported")

// ErrClosed is returned by operations on a closed Link.
var ErrClosed = net.ErrClosed
