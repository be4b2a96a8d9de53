package cli

import (
	"flag"

	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

// relFlag is --reliability on the commands that move data over RC queue
// pairs (send, get, serve, bench): the loss recovery this side wants. "sr" (the
// default) is used only with an xdproce peer that agrees on it for the
// connection (docs/sr-wire.md); with any other peer, or "gbn" on either
// side, the queue pair runs go-back-N, byte for byte as rxe. The result
// says which was used. --bdp beside it caps the send window near the
// path's bandwidth-delay product (ConnectOptions.BDP; nothing on the wire
// changes, so it works with any peer).
type relFlag struct{ s, bdp *string }

func (f *relFlag) register(fs *flag.FlagSet) {
	f.s = fs.String("reliability", "sr", "loss recovery of the RC queue pair: `sr` (selective repeat, used when the xdproce peer agrees; go-back-N otherwise) or gbn (go-back-N, as rxe)")
	f.bdp = fs.String("bdp", "0", "cap the RC send window at about this many `bytes` in flight: the path's bandwidth-delay product (link rate × round trip without queueing), e.g. 256KiB; 0: the default window (1024 packets; 2048 with selective repeat and dcqcn)")
}

// apply puts the choice into o's connect options.
func (f *relFlag) apply(cmd string, o *xfer.Options) error {
	return f.applyTo(cmd, connectOf(o))
}

// applyTo puts the choice into co.
func (f *relFlag) applyTo(cmd string, co *roce.ConnectOptions) error {
	r, err := roce.ParseReliability(*f.s)
	if err != nil {
		return usageErrorf(cmd, "--reliability %q: want sr or gbn", *f.s)
	}
	co.Reliability = r
	bdp, err := ParseSize(*f.bdp)
	if err != nil || bdp > 1<<40 {
		return usageErrorf(cmd, "--bdp %q: want a size such as 256KiB, or 0", *f.bdp)
	}
	co.BDP = int(bdp)
	return nil
}

// connectOf returns o's connect options, made from the defaults if o has
// none yet.
func connectOf(o *xfer.Options) *roce.ConnectOptions {
	if o.Connect == nil {
		co := roce.DefaultConnectOptions()
		o.Connect = &co
	}
	return o.Connect
}

// reliabilityLine is the result line saying which loss recovery a transfer
// used, or "" when it used no RC queue pair.
func reliabilityLine(r string) string {
	switch r {
	case "sr":
		return "loss recovery: selective repeat (agreed with the peer)\n"
	case "gbn":
		return "loss recovery: go-back-N (--reliability gbn on a side, or the peer does not do selective repeat)\n"
	}
	return ""
}
