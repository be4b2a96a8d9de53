package cm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
)

// TestNegotiateTransport (issue 20): bench's loss recovery and congestion control ride on the
// agreement. Selective repeat and DCQCN only when both sides ask for them, with the smaller
// of the two SR windows; a side asking for gbn or none gets both ends that; a client from
// before them (naming neither) is answered with neither, so it runs go-back-N without
// congestion control as it always did.
func TestNegotiateTransport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := BenchParams{Op: "write", Size: 4096, Iters: 64, QPs: 1, Mode: ModeRC}
	with := func(rel string, win int, cc string) BenchParams {
		p := base
		p.Reliability, p.SRWindow, p.CC = rel, win, cc
		return p
	}
	for _, tc := range []struct {
		name           string
		cli, srv, want BenchParams
	}{
		{"both-sr-dcqcn", with(RelSR, 2048, CCDCQCN), with(RelSR, 2048, CCDCQCN), with(RelSR, 2048, CCDCQCN)},
		{"smaller-window", with(RelSR, 2048, CCDCQCN), with(RelSR, 256, CCDCQCN), with(RelSR, 256, CCDCQCN)},
		{"window-unnamed", with(RelSR, 2048, CCNone), with(RelSR, 0, CCNone), with(RelSR, 256, CCNone)},
		{"client-gbn", with(RelGBN, 0, CCDCQCN), with(RelSR, 2048, CCDCQCN), with(RelGBN, 0, CCDCQCN)},
		{"server-gbn-none", with(RelSR, 2048, CCDCQCN), with(RelGBN, 0, CCNone), with(RelGBN, 0, CCNone)},
		{"old-server", with(RelSR, 2048, CCDCQCN), base, with(RelGBN, 0, CCNone)},
		{"old-client", base, with(RelSR, 2048, CCDCQCN), base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := testenv.TCPPair(t)
			cerr, serr := negotiateOnce(ctx, "perftest", c, s, &Negotiation{Local: tc.cli}, &Negotiation{Local: tc.srv})
			for who, err := range map[string]error{"client": cerr, "server": serr} {
				var ae *AgreedError
				if !errors.As(err, &ae) {
					t.Fatalf("%s: %v, want an agreement", who, err)
				}
				p := ae.Params
				if p.Reliability != tc.want.Reliability || p.SRWindow != tc.want.SRWindow || p.CC != tc.want.CC {
					t.Errorf("%s agreed on reliability %q window %d cc %q, want %q %d %q", who, p.Reliability, p.SRWindow, p.CC,
						tc.want.Reliability, tc.want.SRWindow, tc.want.CC)
				}
			}
		})
	}
}

// TestNegotiateTransportRefused: a server's answer naming selective repeat or DCQCN the
// client did not ask for, or a value it does not know, is a protocol error on the client.
func TestNegotiateTransportRefused(t *testing.T) {
	local := BenchParams{Op: "write", Reliability: RelGBN, CC: CCNone}
	n := &Negotiation{Local: local}
	for _, p := range []BenchParams{
		{Reliability: RelSR, SRWindow: 256},
		{CC: CCDCQCN},
		{Reliability: "tcp"},
		{CC: "timely"},
	} {
		if err := n.checkTransport(p); !errors.Is(err, ErrProtocol) {
			t.Errorf("answer %+v to a gbn/none client: %v, want ErrProtocol", p, err)
		}
	}
	n.Local.Reliability = RelSR
	if err := n.checkTransport(BenchParams{Reliability: RelSR}); !errors.Is(err, ErrProtocol) {
		t.Errorf("sr without a window: %v, want ErrProtocol", err)
	}
	if err := n.checkTransport(BenchParams{Reliability: RelSR, SRWindow: 2048}); err != nil {
		t.Errorf("sr asked for and answered: %v", err)
	}
}
