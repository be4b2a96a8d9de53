package cli

import (
	"flag"

	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

// ccFlag is --cc, --ecn and --dscp on the commands that move data over RC
// queue pairs (send, get, serve, bench): the congestion control this side wants
// (docs/cc.md). "dcqcn" (the default) is used only with an xdproce peer
// that agrees on it for the connection; with any other peer, or "none" on
// either side, the queue pair neither paces nor sends CNPs, and its frames
// keep TOS --dscp<<2 (0 by default: rxe's). The result says which was used.
type ccFlag struct {
	cc, ecn *string
	dscp    *uint
}

func (f *ccFlag) register(fs *flag.FlagSet) {
	f.cc = fs.String("cc", "dcqcn", "congestion control of the RC queue pair: `dcqcn` (used when the xdproce peer agrees; none otherwise) or none")
	f.ecn = fs.String("ecn", "on", "with DCQCN, data frames are ECN-capable (ECT(0)) so that switches mark instead of dropping: `on` or off")
	f.dscp = fs.Uint("dscp", 0, "DSCP of the queue pair's frames (0..63)")
}

// apply puts the choice into o's connect options.
func (f *ccFlag) apply(cmd string, o *xfer.Options) error {
	return f.applyTo(cmd, connectOf(o))
}

// applyTo puts the choice into co.
func (f *ccFlag) applyTo(cmd string, co *roce.ConnectOptions) error {
	c, err := roce.ParseCC(*f.cc)
	if err != nil {
		return usageErrorf(cmd, "--cc %q: want dcqcn or none", *f.cc)
	}
	if *f.ecn != "on" && *f.ecn != "off" {
		return usageErrorf(cmd, "--ecn %q: want on or off", *f.ecn)
	}
	if *f.dscp > 63 {
		return usageErrorf(cmd, "--dscp %d: want 0..63", *f.dscp)
	}
	co.CC = c
	co.NoECT = *f.ecn == "off"
	co.TOS = uint8(*f.dscp) << 2
	return nil
}

// ccLine is the result line saying which congestion control a transfer
// used, or "" when it used no RC queue pair.
func ccLine(c string) string {
	switch c {
	case "dcqcn":
		return "congestion control: DCQCN (agreed with the peer)\n"
	case "none":
		return "congestion control: none (--cc none on a side, or the peer does not do DCQCN)\n"
	}
	return ""
}
