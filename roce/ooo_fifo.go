package roce

import (
	"encoding/binary"
	"fmt"

	"github.com/xdproce/xdproce/roce/qp"
)

// Half-RDMA / half-FIFO operations of OOO queue pairs (docs/ooo.md,
// "Half-RDMA / half-FIFO"): one side addresses memory directly, the other
// side's data goes through its receive queue, one receive work request per
// packet (WC.Offset says where the packet lies in its operation), for
// buffers that are not contiguous and for reductions applied as the packets
// arrive (AddUint64).
const (
	WROOOFIFOSend     = qp.WROOOFIFOSend     // half send write: SGL to the peer's receive queue
	WROOOReadToFIFO   = qp.WROOOReadToFIFO   // half send read: the peer's memory to this side's receive queue
	WROOOReadFromFIFO = qp.WROOOReadFromFIFO // half receive read: the peer's user answers into SGL[0]
	WROOOReadReply    = qp.WROOOReadReply    // the answer to a WCOOOReadRequest, from any pieces

	WCOOOFIFO        = qp.WCOOOFIFO        // receive CQ: one OOO_FIFO_SEND packet in a receive work request
	WCOOOReadRequest = qp.WCOOOReadRequest // receive CQ: a peer's half receive read: answer with WROOOReadReply
)

// AddUint64 is the sum reduction applied on arrival: it adds b, a run of
// little-endian uint64s that starts at byte off of the sender's vector (a
// WCOOOFIFO's Offset and the bytes of its receive buffer), into acc
// element by element (acc[off/8+i] += b[i], modulo 2^64). The context's
// duplicate bitmap hands every packet of an operation to the receive queue
// once, so applying each WCOOOFIFO once sums every sender's vector once,
// whatever the network reordered or duplicated.
func AddUint64(acc []uint64, off uint64, b []byte) error {
	if off%8 != 0 || len(b)%8 != 0 {
		return fmt.Errorf("roce: add uint64: %d bytes at offset %d (not whole uint64s)", len(b), off)
	}
	i := off / 8
	if i > uint64(len(acc)) || uint64(len(b)/8) > uint64(len(acc))-i {
		return fmt.Errorf("roce: add uint64: %d bytes at offset %d outside a vector of %d", len(b), off, len(acc))
	}
	a := acc[i : i+uint64(len(b)/8)]
	for k := range a {
		a[k] += binary.LittleEndian.Uint64(b[8*k:])
	}
	return nil
}
