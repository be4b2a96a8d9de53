package cm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// RCEndpoint is what one end of a reliable connection tells the other: its queue pair number,
// the first PSN it sends, its GID and the memory region the peer may access (a zero Region
// when it offers none).
type RCEndpoint struct {
	QPN    uint32     `json:"qpn"`
	PSN    uint32     `json:"psn"`
	GID    netip.Addr `json:"gid"`
	Region Region     `json:"region"`
}

// rcEndpointMsg is ExchangeRC's frame.
type rcEndpointMsg struct {
	Type string `json:"type"` // "rc_endpoint"
	RCEndpoint
}

const typeRCEndpoint = "rc_endpoint"

// ExchangeRC sends mine to the peer of c and returns the peer's RCEndpoint: both ends call it
// once, in any order, after Dial or Accept. A zero mine.GID is filled in with the GID of the
// connection's local IP address (the address the peer reached this end on), which is the right
// one when control and RoCE traffic use the same interface.
//
// The region's rkey goes to whoever is at the other end of c: use it on a connection whose
// peer has authenticated (TLS with a pinned certificate, or the caller's own check), never on
// one anybody may open.
func ExchangeRC(ctx context.Context, c *Conn, mine RCEndpoint) (RCEndpoint, error) {
	if !mine.GID.IsValid() {
		ta, ok := c.LocalAddr().(*net.TCPAddr)
		if !ok {
			return RCEndpoint{}, fmt.Errorf("cm: exchange RC endpoint: no GID given and the local address %v is not TCP", c.LocalAddr())
		}
		ip, _ := netip.AddrFromSlice(ta.IP)
		mine.GID = netip.AddrFrom16(ip.As16())
	}
	if err := checkRCEndpoint(mine); err != nil {
		return RCEndpoint{}, fmt.Errorf("cm: exchange RC endpoint: ours: %w", err)
	}
	if err := c.send(ctx, rcEndpointMsg{Type: typeRCEndpoint, RCEndpoint: mine}, typeRCEndpoint); err != nil {
		return RCEndpoint{}, cmErr(err)
	}
	var m rcEndpointMsg
	if err := c.recvValue(ctx, &m); err != nil {
		return RCEndpoint{}, cmErr(err)
	}
	if m.Type != typeRCEndpoint {
		return RCEndpoint{}, fmt.Errorf("cm: exchange RC endpoint with %v: %w: got a %q message", c.RemoteAddr(), ErrProtocol, m.Type)
	}
	if err := checkRCEndpoint(m.RCEndpoint); err != nil {
		return RCEndpoint{}, fmt.Errorf("cm: exchange RC endpoint with %v: %w: %v", c.RemoteAddr(), ErrProtocol, err)
	}
	return m.RCEndpoint, nil
}

// checkRCEndpoint refuses values no RoCE queue pair can have.
func checkRCEndpoint(e RCEndpoint) error {
	switch {
	case e.QPN < 2 || e.QPN > 0xFFFFFF:
		return fmt.Errorf("queue pair number %#x is not a 24-bit number above QP1", e.QPN)
	case e.PSN > 0xFFFFFF:
		return fmt.Errorf("PSN %#x is over 24 bits", e.PSN)
	case !e.GID.IsValid() || e.GID.Zone() != "":
		return fmt.Errorf("GID %v is not a 16-byte address", e.GID)
	case e.Region.Len == 0 && (e.Region.Addr != 0 || e.Region.RKey != 0):
		return fmt.Errorf("region at %#x with rkey %#x has length 0", e.Region.Addr, e.Region.RKey)
	case e.Region.Addr+e.Region.Len < e.Region.Addr:
		return fmt.Errorf("region at %#x of %d bytes wraps around", e.Region.Addr, e.Region.Len)
	}
	return nil
}
