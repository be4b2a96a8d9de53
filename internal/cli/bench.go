package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

var benchCommand = &Command{
	Name:       "bench",
	ShortUsage: "xdproce bench {write|read|send|atomic|lat} --dev IF [HOST] [--size N] [--iters N] [--qps N] [--json | --perftest] [--atomic-type OP]",
	ShortHelp:  "measure RDMA bandwidth, message rate and latency against a peer (perftest's protocol)",
	LongHelp: `Bench runs one perftest-style test between two xdproce processes: without
HOST it is the server (it waits for the client on --port of the --dev
interface only, runs one test and exits), with HOST the client, which drives
the operations:

  write   RDMA WRITEs into the server's buffer       (ib_write_bw)
  read    RDMA READs from the server's buffer        (ib_read_bw)
  send    SENDs into the server's receive queue      (ib_send_bw)
  atomic  8-byte FETCH_AND_ADD (or --atomic-op cmp_swap) (ib_atomic_bw)
  lat     SEND ping-pong, half round trips           (ib_send_lat)

That exchange carries queue pair numbers and rkeys unauthenticated, as
perftest's does: bench is for benchmarks between hosts you control, not for
exposing memory to untrusted networks.

Both ends speak perftest 6.06's out-of-band exchange, so the peer may also be
the perftest tool of the same test over rxe (ib_write_bw -R is not needed:
perftest's own TCP exchange, port 18515). With --qps N the client opens N
queue pairs, one control connection each, and the server must be given the
same --qps.

With --perftest the output is perftest's own: the test's title, the address
lines of both queue pairs (LID, QPN, PSN, RKey, VAddr, GID) and perftest's
result table (bandwidth tests: bytes, iterations, peak and average MB/s as
2^20 bytes, Mpps; lat: t_min, t_max, typical, average, stdev, 99% and 99.9%
in microseconds, printed by the client). It runs one queue pair, like the
perftest tools without -q. --atomic-type takes perftest's -A names,
FETCH_AND_ADD or CMP_AND_SWAP. Standard error ends with the link, the path
MTU and how many packets xdproce had to retransmit.

Otherwise the table gives the message size, the iterations (per queue pair), the average
bandwidth in Gb/s (10^9 bits), the message rate in Mpps and, for lat, the
median and 99th percentile latency in microseconds. The server prints the
client's measurement, as perftest does.

JSON FORMAT
  --json prints one object: {"schema": 1, "test", "role", "bytes",
  "iterations", "qps", "seconds", "bw_avg_gbps", "msg_rate_mpps",
  "lat_p50_us", "lat_p99_us" (lat only), "link", "path_mtu"}.

EXAMPLES
  sudo xdproce bench write --dev eth1                      # server
  sudo xdproce bench write --dev eth1 198.51.100.1 --size 64KiB --iters 5000
  sudo xdproce bench lat --dev eth1 198.51.100.1 --size 2 --iters 10000
  sudo xdproce bench read --dev eth1 198.51.100.1 --qps 4 --json
  ib_write_bw -d rxe0 -x 1 &  sudo xdproce bench write --dev eth1 198.51.100.1
  ib_atomic_bw -d rxe0 -x 1 -A CMP_AND_SWAP &
    sudo xdproce bench atomic --perftest --atomic-type CMP_AND_SWAP --dev eth1 198.51.100.1`,
	Setup: setupBench,
}

var benchTests = map[string]cm.PerftestTest{
	"write": cm.WriteBW, "read": cm.ReadBW, "send": cm.SendBW, "atomic": cm.AtomicBW, "lat": cm.SendLat,
}

// benchResult is one line of the table.
type benchResult struct {
	Schema  int     `json:"schema"`
	Test    string  `json:"test"`
	Role    string  `json:"role"`
	Bytes   int     `json:"bytes"`
	Iters   int     `json:"iterations"`
	QPs     int     `json:"qps"`
	Seconds float64 `json:"seconds"`
	BW      float64 `json:"bw_avg_gbps"`
	Rate    float64 `json:"msg_rate_mpps"`
	P50     float64 `json:"lat_p50_us,omitempty"`
	P99     float64 `json:"lat_p99_us,omitempty"`
	Link    string  `json:"link"`
	PathMTU int     `json:"path_mtu"`
}

func setupBench(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	var mf metricsFlags
	mf.register(fs)
	size := Size(0)
	fs.Var(&size, "size", "message `bytes` (default 65536; 2 for lat; 8 for atomic)")
	iters := fs.Int("iters", 0, "messages per queue pair (default 5000; 1000 for lat)")
	qps := fs.Int("qps", 1, "queue pairs, each with its own connection (both sides must agree)")
	port := fs.Int("port", cm.DefaultPort, "TCP `port` of perftest's exchange")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	atomicOp := fs.String("atomic-op", "fetch_add", "atomic operation: fetch_add or cmp_swap")
	atomicType := fs.String("atomic-type", "", "atomic operation by perftest's -A `name`: FETCH_AND_ADD or CMP_AND_SWAP (instead of --atomic-op)")
	perftest := fs.Bool("perftest", false, "print perftest's output (addresses, its result table) instead of xdproce's table; one queue pair")
	retry := fs.Duration("connect-timeout", xfer.DefaultDialRetry, "how long the client retries the connection")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce bench"
		if len(args) < 1 || len(args) > 2 {
			return usageErrorf(cmd, "want TEST [HOST] (TEST: write, read, send, atomic or lat)")
		}
		test, ok := benchTests[args[0]]
		if !ok {
			return usageErrorf(cmd, "unknown test %q (want write, read, send, atomic or lat)", args[0])
		}
		n := int(size)
		switch {
		case test == cm.AtomicBW:
			if n != 0 && n != 8 {
				return usageErrorf(cmd, "--size: atomics move 8 bytes")
			}
			n = 8
		case n == 0 && test == cm.SendLat:
			n = 2
		case n == 0:
			n = 65536
		}
		if n <= 0 || n > 1<<30 {
			return usageErrorf(cmd, "--size %d: want 1 byte to 1GiB", n)
		}
		it := *iters
		if it == 0 {
			it = 5000
			if test == cm.SendLat {
				it = 1000
			}
		}
		if it <= 0 || (test == cm.SendBW || test == cm.SendLat) && it > roce.MaxWR {
			return usageErrorf(cmd, "--iters %d: want 1 to %d for send and lat (all receives are posted up front)", it, roce.MaxWR)
		}
		if *qps < 1 || *qps > 64 {
			return usageErrorf(cmd, "--qps %d: want 1 to 64", *qps)
		}
		var op toolpeer.AtomicOp
		switch strings.ToLower(*atomicOp) {
		case "fetch_add", "fetch_and_add", "faa":
			op = toolpeer.FetchAndAdd
		case "cmp_swap", "cmp_and_swap", "cas":
			op = toolpeer.CmpAndSwap
		default:
			return usageErrorf(cmd, "--atomic-op %q: want fetch_add or cmp_swap", *atomicOp)
		}
		if *atomicType != "" {
			atomicOpSet := false
			fs.Visit(func(f *flag.Flag) { atomicOpSet = atomicOpSet || f.Name == "atomic-op" })
			switch t := toolpeer.AtomicOp(*atomicType); {
			case test != cm.AtomicBW:
				return usageErrorf(cmd, "--atomic-type is for the atomic test")
			case t != toolpeer.FetchAndAdd && t != toolpeer.CmpAndSwap:
				return usageErrorf(cmd, "--atomic-type %q: want FETCH_AND_ADD or CMP_AND_SWAP", *atomicType)
			case atomicOpSet && t != op:
				return usageErrorf(cmd, "--atomic-type %s and --atomic-op %s disagree (give one)", *atomicType, *atomicOp)
			default:
				op = t
			}
		}
		if *perftest && *qps != 1 {
			return usageErrorf(cmd, "--perftest runs one queue pair, as the perftest tools without -q (--qps %d)", *qps)
		}
		if *perftest && *jsonOut {
			return usageErrorf(cmd, "--perftest and --json exclude each other")
		}
		if *port <= 0 || *port > 65535 {
			return usageErrorf(cmd, "--port %d", *port)
		}
		if len(args) == 2 {
			if err := checkAddr(cmd, "HOST", args[1], false); err != nil {
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
		b := &bench{env: env, dev: dev.Device, test: test, name: args[0], size: n, iters: it, qps: *qps, op: op}
		var res benchResult
		if len(args) == 2 {
			res, err = b.client(ctx, args[1], *port, *retry)
		} else {
			res, err = b.server(ctx, *port)
		}
		if err != nil {
			if *perftest {
				return fmt.Errorf("bench %s: %w (retransmissions %d)", args[0], interrupted(ctx, err), dev.Stats().Retransmits)
			}
			return fmt.Errorf("bench %s: %w", args[0], interrupted(ctx, err))
		}
		if *perftest {
			printPerftest(env, b, len(args) == 2)
			return nil
		}
		if *jsonOut {
			out, _ := json.Marshal(res)
			fmt.Fprintf(env.Stdout, "%s\n", out)
			return nil
		}
		printBench(env, res)
		return nil
	}
}

type bench struct {
	env   *Env
	dev   *roce.Device
	test  cm.PerftestTest
	name  string
	size  int
	iters int
	qps   int
	op    toolpeer.AtomicOp
	// results are the queue pairs' results of the last run.
	results []toolpeer.PerftestResult
}

// perftestCycleMax is the largest cycle buffer (page size) a perftest peer is
// expected to announce.
const perftestCycleMax = 64 << 10

// peer makes a queue pair, its CQ and buffer for one connection.
func (b *bench) peer(local net.Addr) (*toolpeer.Peer, error) {
	pd := b.dev.AllocPD()
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
	mr, err := pd.RegMR(make([]byte, bufLen), roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic)
	if err != nil {
		return nil, err
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq,
		MaxSendWR: 256, MaxRecvWR: min(max(b.iters, 64), roce.MaxWR)})
	if err != nil {
		return nil, err
	}
	gid := xfer.LocalGID(b.dev, local)
	return &toolpeer.Peer{QP: q, CQ: cq, MR: mr, GID: cm.GIDFromAddr(gid)}, nil
}

// run runs one connection's test.
func (b *bench) run(ctx context.Context, conn net.Conn, client bool) (toolpeer.PerftestResult, error) {
	defer conn.Close()
	p, err := b.peer(conn.LocalAddr())
	if err != nil {
		return toolpeer.PerftestResult{}, err
	}
	return p.Perftest(ctx, conn, client, b.test, b.size, b.iters, int(b.dev.PathMTU()), b.op)
}

func (b *bench) client(ctx context.Context, host string, port int, retry time.Duration) (benchResult, error) {
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		if a, err := netip.ParseAddr(host); err == nil {
			addr = netip.AddrPortFrom(a, uint16(port)).String()
		} else {
			addr = net.JoinHostPort(host, strconv.Itoa(port))
		}
	}
	conns := make([]net.Conn, 0, b.qps)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range b.qps {
		c, err := dialRetry(ctx, addr, retry)
		if err != nil {
			return benchResult{}, err
		}
		conns = append(conns, c)
	}
	results, err := b.all(ctx, conns, true)
	if err != nil {
		return benchResult{}, err
	}
	return b.summarise("client", results, false), nil
}

func (b *bench) server(ctx context.Context, port int) (benchResult, error) {
	ln, err := listenOnDev(ctx, b.dev.Name(), port)
	if err != nil {
		return benchResult{}, err
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	fmt.Fprintf(b.env.Stderr, "bench %s: waiting for %d connection(s) on port %d of %[4]s only (%[4]s over %s, path MTU %d)\n",
		b.name, b.qps, port, b.dev.Name(), b.dev.LinkName(), b.dev.PathMTU().Bytes())
	conns := make([]net.Conn, 0, b.qps)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range b.qps {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return benchResult{}, ctx.Err()
			}
			return benchResult{}, fmt.Errorf("accept: %w", err)
		}
		conns = append(conns, c)
	}
	results, err := b.all(ctx, conns, false)
	if err != nil {
		return benchResult{}, err
	}
	return b.summarise("server", results, true), nil
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
			results[i], errs[i] = b.run(ctx, c, client)
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

// summarise adds up the queue pairs' results; the server reports the
// client's measurement (peer) as perftest does, except for lat, whose
// latencies only the client has.
func (b *bench) summarise(role string, rs []toolpeer.PerftestResult, peer bool) benchResult {
	r := benchResult{Schema: 1, Test: b.name, Role: role, Bytes: b.size, Iters: b.iters, QPs: len(rs),
		Link: b.dev.LinkName(), PathMTU: b.dev.PathMTU().Bytes()}
	var lat []time.Duration
	var longest time.Duration
	var peerBW, peerRate float64
	for _, x := range rs {
		longest = max(longest, x.Elapsed)
		lat = append(lat, x.Latencies...)
		// perftest's MB is 2^20 bytes.
		peerBW += x.PeerReport.BWAvg * (1 << 20) * 8 / 1e9
		peerRate += x.PeerReport.MsgRate
	}
	r.Seconds = longest.Seconds()
	if peer && peerRate > 0 {
		r.BW, r.Rate = peerBW, peerRate
	} else if r.Seconds > 0 {
		msgs := float64(b.iters) * float64(len(rs))
		r.BW = msgs * float64(b.size) * 8 / r.Seconds / 1e9
		r.Rate = msgs / r.Seconds / 1e6
	}
	if b.test == cm.SendLat && len(lat) > 0 {
		slices.Sort(lat)
		pct := func(p float64) float64 {
			i := int(float64(len(lat))*p+0.999999) - 1
			return float64(lat[max(0, min(i, len(lat)-1))]) / 1e3
		}
		r.P50, r.P99 = pct(0.5), pct(0.99)
	}
	return r
}

func printBench(env *Env, r benchResult) {
	line := strings.Repeat("-", 92)
	fmt.Fprintln(env.Stdout, line)
	fmt.Fprintf(env.Stdout, "  xdproce bench %s (%s), %d queue pair(s), %s, path MTU %d\n", r.Test, r.Role, r.QPs, r.Link, r.PathMTU)
	fmt.Fprintln(env.Stdout, line)
	fmt.Fprintf(env.Stdout, " %-10s %-13s %-20s %-15s %-15s %-15s\n", "#bytes", "#iterations", "BW average[Gb/sec]", "MsgRate[Mpps]", "p50[usec]", "p99[usec]")
	p50, p99 := "-", "-"
	if r.P50 > 0 || r.P99 > 0 {
		p50, p99 = strconv.FormatFloat(r.P50, 'f', 2, 64), strconv.FormatFloat(r.P99, 'f', 2, 64)
	}
	fmt.Fprintf(env.Stdout, " %-10d %-13d %-20.2f %-15.6f %-15s %-15s\n", r.Bytes, r.Iters, r.BW, r.Rate, p50, p99)
	fmt.Fprintln(env.Stdout, line)
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

// perftestTitles are the titles perftest prints above its parameters.
var perftestTitles = map[cm.PerftestTest]string{
	cm.WriteBW: "RDMA_Write BW Test", cm.ReadBW: "RDMA_Read BW Test", cm.SendBW: "Send BW Test", cm.SendLat: "Send Latency Test",
}

// printPerftest prints the run as the perftest tool of the test does: title
// and parameters, both addresses, the result table. perftest's send_bw
// server measures what it received; so does this one.
func printPerftest(env *Env, b *bench, client bool) {
	line := strings.Repeat("-", 87)
	res := b.results[0]
	if !client && b.test == cm.SendBW && res.Report.Iters == 0 && res.Elapsed > 0 {
		sec := res.Elapsed.Seconds()
		mbs := float64(b.size) * float64(b.iters) / sec / (1 << 20)
		res.Report = cm.PerftestReport{Size: uint64(b.size), Iters: uint64(b.iters), BWPeak: mbs, BWAvg: mbs, MsgRate: float64(b.iters) / sec / 1e6}
	}
	title := perftestTitles[b.test]
	if b.test == cm.AtomicBW {
		title = "Atomic " + string(b.op) + " BW Test"
	}
	w := env.Stdout
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, "%20s%s\n", "", title)
	fmt.Fprintf(w, " Number of qps   : 1\t\tTransport type : IB\n")
	fmt.Fprintf(w, " Connection type : RC\t\tDevice         : %s\n", b.dev.Name())
	fmt.Fprintf(w, " Mtu             : %d[B]\n", roce.MTU(res.MTU).Bytes())
	fmt.Fprintf(w, " Link type       : Ethernet (%s)\n", b.dev.LinkName())
	gid := netip.AddrFrom16(res.Local.GID)
	for i, g := range b.dev.GIDs() {
		if g == gid {
			fmt.Fprintf(w, " GID index       : %d\n", i)
			break
		}
	}
	if b.test == cm.ReadBW || b.test == cm.AtomicBW {
		fmt.Fprintf(w, " Outstand reads  : %d\n", res.Local.OutReads)
	}
	fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	fmt.Fprintln(w, line)
	lines := res.Lines(b.test)
	for _, l := range lines[:4] {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, line)
	for _, l := range lines[4:] {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, line)
	st := b.dev.Stats()
	fmt.Fprintf(env.Stderr, "bench %s: %s over %s, path MTU %d, retransmissions %d\n", b.name, b.dev.Name(), b.dev.LinkName(), b.dev.PathMTU().Bytes(), st.Retransmits)
}
