package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

type bench struct {
	env   *Env
	dev   *roce.Device
	test  cm.PerftestTest
	name  string
	size  int
	iters int
	qps   int
	op    toolpeer.AtomicOp
	set   []string // the parameters given on the command line (cm.BenchParams.Set)
	sweep bool     // -a: every size from 2 B to 8 MiB, one run each
	// seconds is -D: a calibration run, then one of the iterations that
	// fill this many seconds.
	seconds   int
	calibrate bool       // the next agreed run is one of -D's calibration runs
	mtu       roce.MTU   // path MTU of the queue pairs (0: the device's)
	sgid      netip.Addr // -x: the local GID (zero: the connection's local address)
	// results are the queue pairs' results of the last run.
	results    []toolpeer.PerftestResult
	budgetBase time.Duration // the fixed part of a run's budget (0: budgetBase)
	mode       string        // cm.ModeRC or cm.ModeOOO (bench_ooo.go)
	paths      int           // --paths: UDP source ports of an OOO run
	oooMTU     roce.MTU      // the OOO queue pair's path MTU
	rdmaCM     bool          // -R: perftest's rdma_cm mode (bench_cm.go)
	// want holds --reliability, --cc, --ecn and --dscp: the loss recovery
	// and congestion control this side asks an xdproce peer for, and TOS.
	want roce.ConnectOptions
	// rel, srWin and cc are what the agreement with an xdproce peer gave
	// (cm.BenchParams): "" until then, and with a stock peer, which gets
	// go-back-N without congestion control, as from rxe.
	rel   string
	srWin int
	cc    string
}

// perftestCycleMax is the largest cycle buffer (page size) a perftest peer is
// expected to announce.
const perftestCycleMax = 64 << 10

// peer makes a queue pair, its CQ and buffer for one connection. Its first
// PSN is the tag by which another xdproce recognises it (cm.TagPSN).
func (b *bench) peer(local net.Addr) (*toolpeer.Peer, error) {
	return b.peerIn(local, b.dev.AllocPD())
}

// peerIn is peer with its queue pair and buffer in pd.
func (b *bench) peerIn(local net.Addr, pd *roce.PD) (*toolpeer.Peer, error) {
	depth := min(b.iters+256, roce.MaxCQDepth)
	cq, err := b.dev.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	bufLen := b.size
	if b.test == cm.SendLat {
		bufLen *= 2
	}
	// perftest's requesters step the remote address by the message size
	// (rounded up to a cache line) through a cycle buffer, the larger page
	// size of the two hosts, when the message is at most half of it: they
	// address up to cycle buffer + message bytes. Sized for 64 KiB pages.
	if b.size <= perftestCycleMax/2 {
		bufLen = max(bufLen, perftestCycleMax+b.size+64)
	}
	// AllocMR: on a client of an xdproce daemon, memory shared with the
	// daemon, so a bench between two of its clients runs by direct
	// placement (docs/placement.md); elsewhere ordinary memory.
	mr, err := pd.AllocMR(bufLen, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic)
	if err != nil {
		return nil, err
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq,
		MaxSendWR: 256, MaxRecvWR: min(max(b.iters, 64), roce.MaxWR)})
	if err != nil {
		return nil, err
	}
	gid := b.sgid
	if !gid.IsValid() {
		gid = xfer.LocalGID(b.dev, local)
	}
	p := &toolpeer.Peer{QP: q, CQ: cq, MR: mr, GID: cm.GIDFromAddr(gid)}
	p.PSN = cm.TagPSN(q.QPN(), p.GID, mr.RKey(), mr.Addr())
	if b.mtu != 0 || b.rel == cm.RelSR || b.cc == cm.CCDCQCN || b.want.TOS != 0 || b.want.BDP != 0 {
		opts := roce.DefaultConnectOptions()
		opts.SGID, opts.PathMTU, opts.TOS, opts.BDP = gid, b.mtu, b.want.TOS, b.want.BDP
		if b.rel == cm.RelSR {
			opts.Reliability, opts.SRWindow = roce.SelectiveRepeat, b.srWin
		}
		if b.cc == cm.CCDCQCN {
			opts.CC, opts.NoECT = roce.DCQCN, b.want.NoECT
		}
		p.Connect = &opts
	}
	return p, nil
}

// pathMTU is the MTU the queue pairs use.
func (b *bench) pathMTU() roce.MTU {
	if b.mtu != 0 {
		return b.mtu
	}
	return b.dev.PathMTU()
}

// run runs one connection's test. With n, the connection's exchange first
// checks whether the peer is xdproce (cm.Negotiation); the *cm.AgreedError
// of that is returned as it is.
func (b *bench) run(ctx context.Context, conn net.Conn, client bool, n *cm.Negotiation) (toolpeer.PerftestResult, error) {
	p, err := b.peer(conn.LocalAddr())
	if err != nil {
		return toolpeer.PerftestResult{}, err
	}
	if n != nil {
		conn = n.Conn(conn)
	}
	res, err := p.Perftest(ctx, conn, client, b.test, b.size, b.iters, int(b.pathMTU()), b.op)
	if ae := (*cm.AgreedError)(nil); errors.As(err, &ae) {
		p.QP.Destroy() // never connected: the run starts again with the agreed parameters
	}
	return res, err
}

// params are this side's values for the agreement with an xdproce peer.
func (b *bench) params() cm.BenchParams {
	mode := b.mode
	if mode == "" {
		mode = cm.ModeRC
	}
	p := cm.BenchParams{Op: b.name, Size: b.size, Iters: b.iters, QPs: b.qps, Sweep: b.sweep, Seconds: b.seconds, Calibrate: b.calibrate,
		Mode: mode, Paths: b.paths, Set: b.set, Reliability: b.want.Reliability.String(), CC: b.want.CC.String()}
	if b.want.Reliability == roce.SelectiveRepeat {
		p.SRWindow = roce.SRHold
	}
	return p
}

// first runs the exchange on the first connection. Against a stock perftest
// peer that is the whole test (one queue pair), and its result is returned
// with agreed false. Against xdproce, the two ends agree on the parameters
// (b takes them) and the test runs afterwards on every connection.
func (b *bench) first(ctx context.Context, conn net.Conn, client bool) (res toolpeer.PerftestResult, agreed bool, err error) {
	n := &cm.Negotiation{Local: b.params(), Flags: map[string]string{"size": "--size", "iters": "--iters", "qps": "--qps"},
		Stock: func() error {
			if b.mode == cm.ModeOOO {
				return fmt.Errorf("%w: the peer is not xdproce (perftest?); nothing was sent to it over RoCE", cm.ErrOOOPeer)
			}
			if b.seconds > 0 {
				return fmt.Errorf("the peer is not xdproce (perftest?): -D needs xdproce at both ends (xdproce calibrates the iterations with a run of its own)")
			}
			if b.sweep {
				return fmt.Errorf("the peer is not xdproce (perftest?): -a needs xdproce at both ends (perftest's -a runs its sizes in one exchange of its own)")
			}
			if b.qps > 1 {
				return fmt.Errorf("the peer is not xdproce (perftest?): --qps %d needs xdproce at both ends (perftest's -q runs its queue pairs over one connection)", b.qps)
			}
			return nil
		}}
	b.rel, b.srWin, b.cc = "", 0, "" // the stock exchange's queue pair: go-back-N, no congestion control
	if n.Local.Reliability == cm.RelSR && b.placed(conn) {
		// Both ends are clients of one daemon: their messages go by direct
		// placement, which selective repeat would turn into frames.
		n.Local.Reliability, n.Local.SRWindow = cm.RelGBN, 0
	}
	res, err = b.run(ctx, conn, client, n)
	var ae *cm.AgreedError
	if !errors.As(err, &ae) {
		return res, false, err
	}
	p := ae.Params
	switch {
	case p.Seconds > 0 && b.seconds == 0:
		fmt.Fprintf(b.env.Stderr, "bench %s: agreed with the xdproce peer on %d B for about %d s (-D), %d queue pair(s)\n", b.name, p.Size, p.Seconds, p.QPs)
	case p.Seconds > 0:
	case p.Sweep && !b.sweep:
		fmt.Fprintf(b.env.Stderr, "bench %s: agreed with the xdproce peer on every size from 2 B to 8 MiB (-a), %d iterations, %d queue pair(s)\n", b.name, p.Iters, p.QPs)
	case !p.Sweep && (p.Size != b.size || p.Iters != b.iters || p.QPs != b.qps):
		fmt.Fprintf(b.env.Stderr, "bench %s: agreed with the xdproce peer on %d B, %d iterations, %d queue pair(s)\n", b.name, p.Size, p.Iters, p.QPs)
	}
	if p.Mode == cm.ModeOOO && (b.mode != cm.ModeOOO || p.Paths != b.paths) {
		fmt.Fprintf(b.env.Stderr, "bench %s: agreed with the xdproce peer on --mode ooo, --paths %d\n", b.name, max(p.Paths, 1))
	}
	b.size, b.iters, b.qps, b.sweep, b.seconds, b.calibrate = p.Size, p.Iters, p.QPs, p.Sweep, p.Seconds, p.Calibrate
	b.rel, b.srWin, b.cc = p.Reliability, p.SRWindow, p.CC
	if p.Mode != "" {
		b.mode, b.paths = p.Mode, p.Paths
	}
	return res, true, nil
}

// placed reports whether the peer at the other end of conn is a client of
// the same daemon as b's device (docs/placement.md).
func (b *bench) placed(conn net.Conn) bool {
	a, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	return ok && b.dev.PlacesWith(ip.Unmap())
}

// sweepMax is the largest size of -a, as perftest's.
const sweepMax = 8 << 20

// sizes are the message sizes of the runs: every power of two from 2 B to
// 8 MiB with -a, else the one size.
func (b *bench) sizes() []int {
	if !b.sweep {
		return []int{b.size}
	}
	var s []int
	for n := 2; n <= sweepMax; n *= 2 {
		s = append(s, n)
	}
	return s
}

// runOn makes connections with next until there is one per queue pair,
// runs the test on them within its budget and closes them.
func (b *bench) runOn(ctx context.Context, conns []net.Conn, next func() (net.Conn, error), client bool) ([]toolpeer.PerftestResult, error) {
	defer func() { closeAll(conns) }()
	for len(conns) < b.qps {
		c, err := next()
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	ctx, cancel := withBudget(ctx, b.budgetBase, b.size, b.iters, b.qps)
	defer cancel()
	rs, err := b.all(ctx, conns, client)
	return rs, budgetErr(ctx, err)
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// agreedRuns runs the agreed test, once per size: the first run on the
// first connection and more made by next (dial or accept), the others on
// connections of their own.
func (b *bench) agreedRuns(ctx context.Context, first net.Conn, next func() (net.Conn, error), client bool) ([]benchResult, error) {
	role := map[bool]string{true: "client", false: "server"}[client]
	var out []benchResult
	conns := []net.Conn{first}
	for _, size := range b.sizes() {
		b.size = size
		rs, err := b.runOn(ctx, conns, next, client)
		if err != nil {
			if b.sweep {
				return nil, fmt.Errorf("-a at %d B: %w", size, err)
			}
			return nil, err
		}
		out = append(out, b.summarise(role, rs, !client))
		conns = nil
	}
	return out, nil
}

func (b *bench) client(ctx context.Context, host string, port int, retry time.Duration) ([]benchResult, error) {
	addr := hostPort(host, port)
	c, err := dialRetry(ctx, addr, retry)
	if err != nil {
		return nil, err
	}
	res, agreed, err := b.firstBounded(ctx, c, true)
	if err != nil || !agreed {
		c.Close()
		return b.stockResult(res, err, true)
	}
	dial := func() (net.Conn, error) { return dialRetry(ctx, addr, retry) }
	if b.mode == cm.ModeOOO {
		return b.oooRun(ctx, c, true)
	}
	if b.seconds > 0 {
		return b.timedRuns(ctx, c, dial, true)
	}
	return b.agreedRuns(ctx, c, dial, true)
}

func (b *bench) server(ctx context.Context, port int) ([]benchResult, error) {
	ln, err := listenOnDev(ctx, b.dev.Name(), port)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.env.Stderr, "bench %s: waiting for the client on port %d of %[3]s only (%[3]s over %s, path MTU %d)\n",
		b.name, port, b.dev.Name(), b.dev.LinkName(), b.pathMTU().Bytes())
	return b.serve(ctx, ln)
}

// serve runs the server's test with the clients ln accepts, and closes ln.
func (b *bench) serve(ctx context.Context, ln net.Listener) ([]benchResult, error) {
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	accept := func() (net.Conn, error) { return acceptOne(ctx, ln) }
	c, err := accept()
	if err != nil {
		return nil, err
	}
	res, agreed, err := b.firstBounded(ctx, c, false)
	if err != nil || !agreed {
		c.Close()
		return b.stockResult(res, err, false)
	}
	if b.mode == cm.ModeOOO {
		return b.oooRun(ctx, c, false)
	}
	if b.seconds > 0 {
		return b.timedRuns(ctx, c, accept, false)
	}
	return b.agreedRuns(ctx, c, accept, false)
}

// firstBounded is first within the run's budget.
func (b *bench) firstBounded(ctx context.Context, conn net.Conn, client bool) (toolpeer.PerftestResult, bool, error) {
	ctx, cancel := withBudget(ctx, b.budgetBase, b.size, b.iters, b.qps)
	defer cancel()
	res, agreed, err := b.first(ctx, conn, client)
	return res, agreed, budgetErr(ctx, err)
}

// stockResult is the result of a run against a stock peer (or the error
// of the first connection).
func (b *bench) stockResult(res toolpeer.PerftestResult, err error, client bool) ([]benchResult, error) {
	if err != nil {
		if client {
			err = notToolServer(err, "bench")
		}
		return nil, err
	}
	b.results = []toolpeer.PerftestResult{res}
	return []benchResult{b.summarise(map[bool]string{true: "client", false: "server"}[client], b.results, !client)}, nil
}

// all runs the test on every connection at once.
func (b *bench) all(ctx context.Context, conns []net.Conn, client bool) ([]toolpeer.PerftestResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]toolpeer.PerftestResult, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = b.run(ctx, c, client, nil)
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("queue pair %d: %w", i, err)
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	b.results = results
	return results, nil
}

// notToolServer names an xdproce file server where a bench or pingpong
// server (cmd) was expected: 'xdproce serve' answers a perftest version
// string or a pingpong address with its control protocol's error frame.
func notToolServer(err error, cmd string) error {
	if errors.Is(err, cm.ErrControlPeer) {
		return fmt.Errorf("that is an xdproce file server ('xdproce serve'), not a %s server: run 'xdproce %s --dev IF' there", cmd, cmd)
	}
	return err
}

// dialRetry connects to addr over TCP, retrying refused and unreachable
// connections for up to retry (the server may still be starting).
func dialRetry(ctx context.Context, addr string, retry time.Duration) (net.Conn, error) {
	start := time.Now()
	backoff := 50 * time.Millisecond
	var d net.Dialer
	for attempt := 1; ; attempt++ {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(start)+backoff > retry {
			return nil, fmt.Errorf("connect to %s (%d attempts in %v): %w", addr, attempt, time.Since(start).Round(10*time.Millisecond), err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}
