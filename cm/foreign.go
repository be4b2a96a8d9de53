package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// The three exchanges share TCP port 18515, so a peer of one kind may reach a server of
// another. These recognise the first bytes of the others, for an error that says so.

// controlFrameStart reports whether b starts like a frame of the control protocol: a length
// within MaxFrame and a JSON object.
func controlFrameStart(b []byte) bool {
	return len(b) >= 6 && binary.BigEndian.Uint32(b) <= MaxFrame && bytes.HasPrefix(b[4:], []byte(`{"`))
}

// notControl describes what a control server received instead of a frame header, when it is
// the start of a perftest or pingpong exchange ("" otherwise).
func notControl(hdr []byte) string {
	switch {
	case len(hdr) >= 4 && atof(string(hdr)) >= 4 && bytes.IndexByte(hdr[:4], '.') > 0:
		return "the peer speaks perftest's exchange ('xdproce bench' or a perftest tool), not xdproce's control protocol"
	case len(hdr) >= 4 && isHex(hdr[:4]):
		return "the peer speaks ibv_*_pingpong's exchange ('xdproce pingpong' or an rdma-core tool), not xdproce's control protocol"
	}
	return ""
}

// refuseForeign answers a client whose first bytes were no frame of the control protocol (err
// wraps ErrProtocol; notControl names perftest's or pingpong's exchange) with one error frame
// saying what this endpoint is, which bench and pingpong clients recognise (ErrControlPeer).
// It returns err.
func (c *Conn) refuseForeign(ctx context.Context, err error) error {
	if errors.Is(err, ErrProtocol) {
		c.sendMsg(ctx, &Message{Type: TypeError, Error: "this is an xdproce control endpoint: " + err.Error()})
	}
	return err
}

// controlPeerErr is the error of a perftest or pingpong side whose peer answered with a control
// frame (an xdproce file server refusing what it read).
func controlPeerErr(what string) error {
	return fmt.Errorf("cm: %s: %w (an xdproce file server?)", what, ErrControlPeer)
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
