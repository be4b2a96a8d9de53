package cli

import (
	"flag"
	"fmt"
	"slices"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// modeFlags are send's and get's --mode (and send's --paths): RC, the
// default, or OOO mode (docs/ooo.md).
type modeFlags struct {
	mode  string
	paths int
}

func (m *modeFlags) register(fs *flag.FlagSet, paths bool) {
	fs.StringVar(&m.mode, "mode", "rc", "`rc` (RDMA WRITE/READ on an RC queue pair) or ooo (out-of-order OOO WRITE/READ, retried by this side; the server must offer it)")
	if paths {
		fs.IntVar(&m.paths, "paths", 0, fmt.Sprintf("with --mode ooo: spread each operation's packets over `N` UDP source ports (1..%d; one on --link udp)", roce.MaxOOOPaths))
	}
}

// apply sets o and the hello's requirements for the mode; enl is --enlarge.
func (m *modeFlags) apply(cmd string, o *xfer.Options, ccfg *cm.Config, enl bool) error {
	switch m.mode {
	case "rc":
		if m.paths != 0 {
			return usageErrorf(cmd, "--paths needs --mode ooo")
		}
		return nil
	case "ooo":
	default:
		return usageErrorf(cmd, "--mode %q: want rc or ooo", m.mode)
	}
	if enl {
		return usageErrorf(cmd, "--mode ooo and --enlarge exclude each other")
	}
	if m.paths < 0 || m.paths > roce.MaxOOOPaths {
		return usageErrorf(cmd, "--paths %d: want 1..%d", m.paths, roce.MaxOOOPaths)
	}
	// A server without OOO mode refuses in the hello, with one line.
	ccfg.Require = append(slices.Clip(ccfg.Require), cm.CapOOO)
	o.OOO = &ooo.Config{Paths: uint8(m.paths)}
	return nil
}

// printOOO is the second result line of a transfer in OOO mode.
func printOOO(env *Env, r *xfer.OOOResult) error {
	_, err := fmt.Fprintf(env.Stdout, "ooo: %d paths, %d operations delivered, %d retries, %d stale completions, loss estimate %.2f %% (operations of %d packets); this side dropped %d stale-tid, %d duplicate packets\n",
		r.Paths, r.Delivered, r.Retries, r.StaleCompletions, 100*r.LossEstimate, r.OpPackets, r.StaleTID, r.DupIndex)
	return err
}
