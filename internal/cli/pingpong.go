package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

var pingpongCommand = &Command{
	Name:       "pingpong",
	ShortUsage: "xdproce pingpong --dev IF [--uc | --ud | --srq [-q QPS]] [-g N] [-s SIZE] [-n ITERS] [-m MTU] [-p PORT] [HOST]",
	ShortHelp:  "ping-pong SENDs with a peer as rdma-core's ibv_rc_pingpong (or uc, ud, srq) does (its exchange, flags and output)",
	LongHelp: `Pingpong is rdma-core's ibv_rc_pingpong on xdproce: one RC queue pair,
SENDs of SIZE bytes bounced ITERS times each way. Without HOST it is the
server (it waits for one client on TCP port -p of the --dev interface only,
runs and exits), with HOST the client, which sends first. The out-of-band
exchange is ibv_rc_pingpong's (one text address message each way and "done",
TCP 18515), so the peer may be ibv_rc_pingpong itself over rxe or another
xdproce. It carries queue pair numbers unauthenticated: pingpong is for tests
between hosts you control, not for untrusted networks.

Two xdproce ends recognise each other inside that exchange (by the PSNs they
pick; ibv_rc_pingpong sees nothing else) and agree on -s and -n first: a side
not given one takes the other's, and values given on both sides that differ
end both with one line naming both. Against ibv_rc_pingpong nothing is
agreed: give both the same -s and -n; the run is bounded (30 s, and 1 ms plus
the bytes at 10 MB/s per message), so a mismatch ends in an error instead of
a wait. The server listens on every address, runs once and exits; the
exchange is unauthenticated, as rdma-core's: a benchmark tool, not for
networks whose peers you do not trust.

The flags mean what ibv_rc_pingpong's do: -g the GID index (as 'xdproce info'
lists the GIDs: 1 is the first IPv4 address; by default the GID of the
address the TCP connection uses), -s the message size, -n the iterations,
-m the path MTU in bytes (at most the interface's RoCE path MTU: a larger one
is lowered to it, with a note), -p the TCP port. -r, -l, -i and -e are
accepted for command lines written for ibv_rc_pingpong: every receive is
posted up front (so -n is at most 32768), RoCE has no service level, there is
one port, and completions are waited for without spinning anyway.

--uc, --ud and --srq speak ibv_uc_pingpong's, ibv_ud_pingpong's and
ibv_srq_pingpong's exchanges and loops instead: a UC queue pair; a UD queue
pair (Q_Key 0x11111111, receives of -s bytes behind the 40-byte GRH area, -s
at most -m); -q RC queue pairs (default 16) on one shared receive queue of -r
receives (default 500, reposted as the tool does), 256 address messages each
way, -n counting the iterations of all queue pairs together. These agree on
nothing with another xdproce: give both sides the same flags. --srq prints an
address line per queue pair each way.

Standard output gets ibv_rc_pingpong's four lines: both addresses (LID, QPN,
PSN, GID), bytes moved (both directions) with the rate in Mbit/s, and
iterations with the time per iteration. Standard error ends with the link,
the path MTU and how many packets xdproce had to retransmit.

EXAMPLES
  sudo xdproce pingpong --dev eth1                                    # server: takes -s and -n
  sudo xdproce pingpong --dev eth1 -g 1 -s 3000 -n 20 198.51.100.1    # client
  ibv_rc_pingpong -d rxe0 -g 1 -s 64 -n 20 &  xdproce pingpong --dev eth1 --link udp 198.51.100.2`,
	Setup: setupPingpong,
}

func setupPingpong(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	var mf metricsFlags
	mf.register(fs)
	gidx := fs.Int("g", -1, "local GID `index` (-1: the GID of the TCP connection's local address)")
	size := fs.Int("s", 4096, "message `bytes`")
	iters := fs.Int("n", 1000, "`iterations` (messages each way)")
	mtu := fs.Int("m", 1024, "path MTU in `bytes`: 256, 512, 1024, 2048 or 4096")
	port := fs.Int("p", cm.DefaultPort, "TCP `port` of the address exchange")
	rx := fs.Int("r", 500, "receive queue `depth` (accepted; xdproce posts all -n receives up front)")
	sl := fs.Int("l", 0, "service `level` 0..15 (accepted; RoCE has none)")
	ibPort := fs.Int("i", 1, "`port` of the device (only 1)")
	fs.Bool("e", false, "sleep on completion events (accepted; xdproce never spins on the CQ)")
	retry := fs.Duration("connect-timeout", xfer.DefaultDialRetry, "how long the client retries the connection")
	uc := fs.Bool("uc", false, "speak ibv_uc_pingpong (a UC queue pair)")
	ud := fs.Bool("ud", false, "speak ibv_ud_pingpong (a UD queue pair; -s at most the path MTU)")
	srq := fs.Bool("srq", false, "speak ibv_srq_pingpong (-q RC queue pairs on one shared receive queue of -r receives)")
	numQP := fs.Int("q", 16, "queue `pairs` of --srq")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce pingpong"
		if len(args) > 1 {
			return usageErrorf(cmd, "want at most one HOST, got %q", args)
		}
		mode, err := pickMode(*uc, *ud, *srq)
		if err != nil {
			return usageErrorf(cmd, "%v", err)
		}
		switch {
		case mode == modeSRQ && (*numQP <= 0 || *numQP > cm.SRQPingpongMsgs):
			return usageErrorf(cmd, "-q %d: want 1 to %d queue pairs", *numQP, cm.SRQPingpongMsgs)
		case mode == modeSRQ && (*rx < *numQP || *rx > roce.MaxWR):
			return usageErrorf(cmd, "-r %d: want %d (one receive per queue pair) to %d", *rx, *numQP, roce.MaxWR)
		case mode == modeUD && *size > *mtu:
			return usageErrorf(cmd, "-s %d: a UD message fits one packet, at most -m (%d)", *size, *mtu)
		}
		switch {
		case *size <= 0 || *size > 1<<30:
			return usageErrorf(cmd, "-s %d: want 1 byte to 1GiB", *size)
		case *iters <= 0 || *iters > roce.MaxWR:
			return usageErrorf(cmd, "-n %d: want 1 to %d (every receive is posted up front)", *iters, roce.MaxWR)
		case roce.MTUFromBytes(*mtu) == 0:
			return usageErrorf(cmd, "-m %d: want 256, 512, 1024, 2048 or 4096", *mtu)
		case *port <= 0 || *port > 65535:
			return usageErrorf(cmd, "-p %d: want a TCP port 1 to 65535", *port)
		case *rx <= 0:
			return usageErrorf(cmd, "-r %d: want a positive depth", *rx)
		case *sl < 0 || *sl > 15:
			return usageErrorf(cmd, "-l %d: want a service level 0 to 15", *sl)
		case *ibPort != 1:
			return usageErrorf(cmd, "-i %d: xdproce devices have one port, 1", *ibPort)
		case *gidx < -1:
			return usageErrorf(cmd, "-g %d: want a GID index (see 'xdproce info') or -1", *gidx)
		}
		if len(args) == 1 {
			if err := checkAddr(cmd, "HOST", args[0], false); err != nil {
				return err
			}
		}
		dev, err := openDevice(env, cmd, &df)
		if err != nil {
			return err
		}
		defer closeDevice(env, dev)
		stopMetrics, err := mf.start(env, dev)
		if err != nil {
			return err
		}
		defer stopMetrics()
		pathMTU := roce.MTUFromBytes(*mtu)
		if devMTU := dev.PathMTU(); pathMTU > devMTU {
			fmt.Fprintf(env.Stderr, "pingpong: -m %d is more than the path MTU of %s, %d; using %d\n", *mtu, dev.Name(), devMTU.Bytes(), devMTU.Bytes())
			pathMTU = devMTU
		}
		var sgid netip.Addr
		if *gidx >= 0 {
			if sgid, err = dev.GID(*gidx); err != nil {
				return usageErrorf(cmd, "-g %d: %s has %d GIDs (see 'xdproce info')", *gidx, dev.Name(), len(dev.GIDs()))
			}
		}
		p := &pingpong{env: env, dev: dev.Device, size: *size, iters: *iters, mtu: pathMTU, sgid: sgid,
			set: explicitFlags(fs, map[string]string{"s": "size", "n": "iters"})}
		var conn net.Conn
		client := len(args) == 1
		if client {
			conn, err = dialRetry(ctx, hostPort(args[0], *port), *retry)
		} else {
			conn, err = p.accept(ctx, *port)
		}
		if err != nil {
			return fmt.Errorf("pingpong: %w", interrupted(ctx, err))
		}
		defer conn.Close()
		var lines []string
		if mode == modeRC {
			var res toolpeer.PingpongResult
			res, err = p.agreeAndRun(ctx, conn, client)
			lines = res.Lines()
		} else {
			lines, err = p.runMode(ctx, conn, client, mode, *numQP, *rx)
		}
		st := dev.Stats()
		if err != nil {
			return fmt.Errorf("pingpong: %w (retransmissions %d)", interrupted(ctx, notToolServer(err, "pingpong")), st.Retransmits)
		}
		for _, l := range lines {
			fmt.Fprintln(env.Stdout, l)
		}
		fmt.Fprintf(env.Stderr, "pingpong: %s over %s, path MTU %d, retransmissions %d\n", dev.Name(), dev.LinkName(), pathMTU.Bytes(), st.Retransmits)
		return nil
	}
}

// hostPort joins host and port unless host already names a port.
func hostPort(host string, port int) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a, uint16(port)).String()
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

type pingpong struct {
	env   *Env
	dev   *roce.Device
	size  int
	iters int
	mtu   roce.MTU
	sgid  netip.Addr // zero: from the connection's local address
	set   []string   // the parameters given on the command line (cm.BenchParams.Set)
	// budgetBase is the fixed part of the run's budget (0: budgetBase).
	budgetBase time.Duration
}

// agreeAndRun runs the exchange on conn within the run's budget. Against
// another xdproce the two ends first agree on -s and -n (cm.Negotiation):
// a side not given one takes the other's, and values given on both sides
// must be equal; then the exchange runs again with them.
func (p *pingpong) agreeAndRun(ctx context.Context, conn net.Conn, client bool) (toolpeer.PingpongResult, error) {
	n := &cm.Negotiation{Local: cm.BenchParams{Op: "pingpong", Size: p.size, Iters: p.iters, QPs: 1, Set: p.set},
		Flags: map[string]string{"size": "-s", "iters": "-n"}}
	bctx, cancel := withBudget(ctx, p.budgetBase, p.size, p.iters, 1)
	defer cancel()
	res, err := p.run(bctx, n.Conn(conn), client)
	var ae *cm.AgreedError
	if !errors.As(err, &ae) {
		return res, budgetErr(bctx, err)
	}
	if ae.Params.Size != p.size || ae.Params.Iters != p.iters {
		fmt.Fprintf(p.env.Stderr, "pingpong: agreed with the xdproce peer on -s %d -n %d\n", ae.Params.Size, ae.Params.Iters)
	}
	p.size, p.iters = ae.Params.Size, ae.Params.Iters
	if p.iters > roce.MaxWR {
		return res, fmt.Errorf("the peer asks for -n %d, more than %d", p.iters, roce.MaxWR)
	}
	cancel()
	bctx, cancel = withBudget(ctx, p.budgetBase, p.size, p.iters, 1)
	defer cancel()
	res, err = p.run(bctx, conn, client)
	return res, budgetErr(bctx, err)
}

// accept waits for one client on port.
func (p *pingpong) accept(ctx context.Context, port int) (net.Conn, error) {
	ln, err := listenOnDev(ctx, p.dev.Name(), port)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	fmt.Fprintf(p.env.Stderr, "pingpong: waiting for the client on port %d of %s only (over %s)\n", port, p.dev.Name(), p.dev.LinkName())
	return acceptOne(ctx, ln)
}

// run makes the queue pair and buffer and runs ibv_rc_pingpong's exchange
// and loop on conn.
func (p *pingpong) run(ctx context.Context, conn net.Conn, client bool) (toolpeer.PingpongResult, error) {
	pd := p.dev.AllocPD()
	cq, err := p.dev.CreateCQ(min(p.iters+256, roce.MaxCQDepth))
	if err != nil {
		return toolpeer.PingpongResult{}, err
	}
	// The receive half first, then the send half: 2×size, as the tool's buffer.
	mr, err := pd.RegMR(make([]byte, 2*p.size), roce.LocalWrite)
	if err != nil {
		return toolpeer.PingpongResult{}, err
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: max(p.iters, 16)})
	if err != nil {
		return toolpeer.PingpongResult{}, err
	}
	gid := p.sgid
	if !gid.IsValid() {
		gid = xfer.LocalGID(p.dev, conn.LocalAddr())
	}
	opts := roce.DefaultConnectOptions()
	opts.SGID, opts.PathMTU = gid, p.mtu
	peer := &toolpeer.Peer{QP: q, CQ: cq, MR: mr, GID: cm.GIDFromAddr(gid), Connect: &opts}
	peer.PSN = cm.TagPSN(q.QPN(), peer.GID, 0, 0) // how another xdproce recognises this side
	res, err := peer.Pingpong(ctx, conn, client, p.size, p.iters)
	if ae := (*cm.AgreedError)(nil); errors.As(err, &ae) {
		q.Destroy() // never connected: the exchange runs again with the agreed values
	}
	return res, err
}
