package roce

import "github.com/xdproce/xdproce/roce/wire"

// icrcRepair decides whether an ICRC mismatch on a frame whose IPv4 header was
// rebuilt by the link (Identification set to 0) is explained by the unknown
// Identification alone: wire.RecoverIPv4ID solves for it (the CRC is linear,
// so this is a 16-column elimination, not a search). link/udp already writes
// the recovered Identification into the frames it hands over, so this is the
// fallback for other links with Props.SyntheticHeaders.
type icrcRepair struct{}

// explains reports whether frame (decoded into p, which found a bad ICRC) has
// an ICRC that is right for some other IPv4 Identification. It allocates
// nothing.
func (icrcRepair) explains(frame []byte, p *wire.Packet) bool {
	if p.IPv6 || p.IPID != 0 {
		return false
	}
	_, ok := wire.RecoverIPv4ID(frame)
	return ok
}
