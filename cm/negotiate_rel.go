package cm

import "fmt"

// The loss recovery and congestion control of a bench run's RC queue pairs (bench
// --reliability, --cc) ride on the agreement of negotiate.go, xdproce to xdproce only: each
// side sends what it wants, and the server answers what both use. Selective repeat ("sr")
// only when both ask for it, DCQCN ("dcqcn") likewise; otherwise go-back-N and no congestion
// control, as with a stock perftest peer, which never sees any of this.

// The values of BenchParams.Reliability and CC.
const (
	RelSR   = "sr"    // selective repeat (docs/sr-wire.md)
	RelGBN  = "gbn"   // go-back-N, as rxe
	CCDCQCN = "dcqcn" // DCQCN (docs/cc.md)
	CCNone  = "none"  // no congestion control
)

// resolveTransport sets out's loss recovery and congestion control from what the client and
// the server (srv) want: each only when both ask for it. A client from before them names
// neither and gets neither named back.
func resolveTransport(out *BenchParams, client, srv BenchParams) {
	if client.Reliability != "" {
		out.Reliability = RelGBN
		if client.Reliability == RelSR && srv.Reliability == RelSR {
			out.Reliability = RelSR
			out.SRWindow = srWindow(client.SRWindow, srv.SRWindow)
		}
	}
	if client.CC != "" {
		out.CC = CCNone
		if client.CC == CCDCQCN && srv.CC == CCDCQCN {
			out.CC = CCDCQCN
		}
	}
}

// srWindow is the PSNs past a hole both hold: the smaller of the two sides' (a side that
// names none holds the 256 of the first selective repeat).
func srWindow(a, b int) int {
	if a <= 0 {
		a = 256
	}
	if b <= 0 {
		b = 256
	}
	return min(a, b)
}

// checkTransport checks the server's answer against what this client asked for: nothing this
// side did not ask for (an older server answers neither: go-back-N, no congestion control).
func (n *Negotiation) checkTransport(p BenchParams) error {
	switch {
	case p.Reliability != "" && p.Reliability != RelGBN && p.Reliability != RelSR,
		p.Reliability == RelSR && n.Local.Reliability != RelSR,
		p.Reliability == RelSR && p.SRWindow <= 0,
		p.CC != "" && p.CC != CCNone && p.CC != CCDCQCN,
		p.CC == CCDCQCN && n.Local.CC != CCDCQCN:
		return fmt.Errorf("cm: bench parameters from the server: %w: reliability %q (window %d), cc %q for a client that asked for %q, %q",
			ErrProtocol, p.Reliability, p.SRWindow, p.CC, n.Local.Reliability, n.Local.CC)
	}
	return nil
}
