package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

var benchCommand = &Command{
	Name:       "bench",
	ShortUsage: "xdproce bench {write|read|send|atomic|lat} --dev IF [HOST] [--size N | -a] [--iters N | -D SEC] [--qps N] [--mode ooo [--paths N]] [--reliability sr|gbn] [--cc dcqcn|none] [-R] [--json | --perftest] [--atomic-type OP]",
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
the perftest tool of the same test over rxe: its TCP exchange (port 18515)
by default, its RDMA CM mode with -R (below).

RDMA CM (-R)
-R is perftest's -R (every test): the client connects a control
queue pair to the server's rdma_cm port (--port, 18515; RDMA_PS_TCP) through
the RDMA CM and runs perftest's exchange on it as SENDs, then connects the
test queue pair through a second CM connection to the same port (with -q N,
N test queue pairs, one CM connection each, all running at once); afterwards
the client disconnects them all. The peer may be perftest's tool with -R or
xdproce with -R. Nothing is agreed: give both ends the same --size, --iters
and -q, as with perftest (a mismatch ends in an error within the run's
bound). One size, by iterations; lat runs one queue pair. The client asks again
while the server answers that nothing listens (for --connect-timeout).

TWO XDPROCE ENDS AGREE
Two xdproce ends recognise each other inside perftest's exchange (by the
PSNs they pick; a perftest peer sees nothing else) and agree on the test,
--size, --iters, --qps, -a and -D before running it: a server not given one
takes the client's, a value given on one side only is used by both, and a
value given on both sides that differs (or another test) ends both with one
line naming both values. With --qps N the client opens N queue pairs, one
connection each. Against a perftest tool nothing is agreed: give both the
same values; every run is then bounded (30 s, and 1 ms plus the bytes at
10 MB/s per message), so a mismatch ends in an error instead of a wait.

OOO MODE
--mode ooo (write only) runs the WRITEs on OOO queue pairs (docs/ooo.md):
out-of-order RDMA over datagrams, each WRITE proven by its delivered
completion; --paths N spreads each WRITE's packets over N UDP source ports
(over AF_XDP; --link udp sends from port 4791 only). It needs xdproce at
both ends, which agree on it (a server not given --mode takes the
client's): against perftest, or an xdproce from before OOO mode, the side
given --mode ooo stops with one line and nothing OOO is sent. The server
hands its buffer's contexts, keys and rkey to the client over the same
unauthenticated exchange as every bench test: a benchmark bound to --dev,
one test, then exit. The client keeps 16 WRITEs in flight, reissues one
with no delivered completion within its timeout with the next transaction
id, checks that the server's buffer holds its bytes (SHA-256) and that the
server sent a completion per WRITE; the table adds the reissues, --json
"mode", "paths" and "retries". One queue pair, one size, by iterations.

LOSS RECOVERY AND CONGESTION CONTROL
--reliability sr|gbn and --cc dcqcn|none (with --ecn, --dscp) are send's:
two xdproce ends agree on them with the parameters, selective repeat and
DCQCN only where both ask for them (the defaults); otherwise, against a
perftest peer, with -R (nothing agreed) and in OOO mode, the queue pairs run
go-back-N without congestion control, byte for byte as rxe; so do two
clients of one daemon (their messages go by direct placement). The table's
title and --json's "reliability" and "cc" say what the queue pairs used.

PERFTEST'S FLAGS
-s, -n, -q and -p are --size, --iters, --qps and --port; -d names the
interface (xdproce's device is the interface: same as --dev); -x the local
GID index as 'xdproce info' lists them; -m the path MTU in bytes (at most the
interface's); -F is accepted; --report_gbits gives --perftest's bandwidth in
Gb/s. -a runs every size from 2 B to 8 MiB (powers of two), one run and one
row each; -D SEC runs for about SEC seconds: runs of 100 messages, ten times
as many each while one lasts under 200 ms, then as many as fill the rest of
the time at the last one's rate; the row gives all their messages over the
sum of their data phases. Both need xdproce at both ends (a perftest peer is
refused with a line).

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
  --json prints one object per line, one per run (per size with -a):
  {"schema": 1, "test", "role", "bytes",
  "iterations", "qps", "seconds", "bw_avg_gbps", "msg_rate_mpps",
  "lat_p50_us", "lat_p99_us" (lat only), "mode", "paths", "retries" (--mode
  ooo only), "reliability", "cc" (RC only), "link", "path_mtu"}.

EXAMPLES
  sudo xdproce bench write --dev eth1                      # server
  sudo xdproce bench write --dev eth1 198.51.100.1 --size 64KiB --iters 5000
  sudo xdproce bench lat --dev eth1 198.51.100.1 --size 2 --iters 10000
  sudo xdproce bench read --dev eth1 198.51.100.1 --qps 4 --json
  sudo xdproce bench write --dev eth1 198.51.100.1 --mode ooo --paths 4
  sudo xdproce bench write -d eth1 198.51.100.1 -a -n 1000 # perftest's flags
  sudo xdproce bench send -d eth1 198.51.100.1 -s 4096 -D 5
  ib_read_bw -d rxe0 -x 1 -R &  sudo xdproce bench read -R --perftest --dev eth1 198.51.100.1
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
	Mode    string  `json:"mode,omitempty"`    // "ooo" for --mode ooo (RC otherwise)
	Paths   int     `json:"paths,omitempty"`   // --mode ooo: UDP source ports
	Retries int     `json:"retries,omitempty"` // --mode ooo: WRITEs reissued after a timeout
	// Reliability and CC are the RC queue pairs' loss recovery ("sr" or
	// "gbn") and congestion control ("dcqcn" or "none").
	Reliability string  `json:"reliability,omitempty"`
	CC          string  `json:"cc,omitempty"`
	P50         float64 `json:"lat_p50_us,omitempty"`
	P99         float64 `json:"lat_p99_us,omitempty"`
	Link        string  `json:"link"`
	PathMTU     int     `json:"path_mtu"`
}

func setupBench(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	var mf metricsFlags
	mf.register(fs)
	fs.StringVar(&df.dev, "d", "", "perftest's -d: the `interface` (xdproce's device is the interface; same as --dev)")
	size := Size(0)
	fs.Var(&size, "size", "message `bytes` (default 65536; 2 for lat; 8 for atomic)")
	fs.Var(&size, "s", "perftest's -s: message `bytes`, same as --size")
	iters := fs.Int("iters", 0, "messages per queue pair (default 5000; 1000 for lat)")
	fs.IntVar(iters, "n", 0, "perftest's -n: same as --iters")
	qps := fs.Int("qps", 1, "queue pairs, each with its own connection (an xdproce server not given --qps takes the client's)")
	fs.IntVar(qps, "q", 1, "perftest's -q: same as --qps")
	port := fs.Int("port", cm.DefaultPort, "TCP `port` of perftest's exchange (with -R its rdma_cm port)")
	fs.IntVar(port, "p", cm.DefaultPort, "perftest's -p: same as --port")
	gidx := fs.Int("x", -1, "perftest's -x: local GID `index` (see 'xdproce info'; default: the GID of the TCP connection's local address)")
	mtu := fs.Int("m", 0, "perftest's -m: path MTU in `bytes`, 256 to 4096 (default: the interface's RoCE path MTU)")
	fs.Bool("F", false, "perftest's -F (accepted: xdproce reads no CPU frequency)")
	gbits := fs.Bool("report_gbits", false, "perftest's --report_gbits: with --perftest, bandwidth in Gb/s instead of MB/s")
	seconds := fs.Int("D", 0, "perftest's -D: run about this many `seconds` (runs growing from 100 messages, then the rest of the time at their rate; xdproce at both ends)")
	sweep := fs.Bool("a", false, "perftest's -a: every size from 2 B to 8 MiB (powers of two), one run and one row each (xdproce at both ends)")
	rdmaCM := fs.Bool("R", false, "perftest's -R: connect through the RDMA CM and run the exchange over a control queue pair (nothing agreed)")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	atomicOp := fs.String("atomic-op", "fetch_add", "atomic operation: fetch_add or cmp_swap")
	atomicType := fs.String("atomic-type", "", "atomic operation by perftest's -A `name`: FETCH_AND_ADD or CMP_AND_SWAP (instead of --atomic-op)")
	perftest := fs.Bool("perftest", false, "print perftest's output (addresses, its result table) instead of xdproce's table; one queue pair")
	retry := fs.Duration("connect-timeout", xfer.DefaultDialRetry, "how long the client retries the connection")
	mode := fs.String("mode", cm.ModeRC, "queue pairs: rc, or ooo (out-of-order RDMA over datagrams, docs/ooo.md; write only, xdproce at both ends)")
	paths := fs.Int("paths", 1, "--mode ooo: spread each WRITE's packets over `N` UDP source ports (1 to 64)")
	var rf relFlag
	rf.register(fs)
	var ccf ccFlag
	ccf.register(fs)
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce bench"
		if len(args) < 1 || len(args) > 2 {
			return usageErrorf(cmd, "want TEST [HOST] (TEST: write, read, send, atomic or lat)")
		}
		test, ok := benchTests[args[0]]
		if !ok {
			return usageErrorf(cmd, "unknown test %q (want write, read, send, atomic or lat)", args[0])
		}
		set := explicitFlags(fs, benchParamFlags)
		if *rdmaCM {
			if err := checkBenchCM(cmd, args[0], *qps, *sweep, *seconds, *mode); err != nil {
				return err
			}
		}
		if *sweep {
			switch {
			case slices.Contains(set, "size"):
				return usageErrorf(cmd, "-a runs every size; give no --size")
			case test == cm.AtomicBW:
				return usageErrorf(cmd, "-a: atomics move 8 bytes")
			case *perftest:
				return usageErrorf(cmd, "-a prints xdproce's table, one row per size (not --perftest)")
			}
			size = 2
		}
		if *seconds != 0 {
			switch {
			case *seconds < 0:
				return usageErrorf(cmd, "-D %d: want a positive number of seconds", *seconds)
			case slices.Contains(set, "iters"):
				return usageErrorf(cmd, "-D sets the iterations; give no --iters")
			case *sweep:
				return usageErrorf(cmd, "-D and -a exclude each other")
			}
		}
		n := int(size)
		switch {
		case slices.Contains(set, "size") && n <= 0:
			return usageErrorf(cmd, "--size %d: want 1 byte to 1GiB", n)
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
		switch {
		case slices.Contains(set, "iters") && it <= 0:
			return usageErrorf(cmd, "--iters %d: want at least 1", it)
		case it == 0 && test == cm.SendLat:
			it = 1000
		case it == 0:
			it = 5000
		}
		if it <= 0 || (test == cm.SendBW || test == cm.SendLat) && it > roce.MaxWR {
			return usageErrorf(cmd, "--iters %d: want 1 to %d for send and lat (all receives are posted up front)", it, roce.MaxWR)
		}
		if *qps < 1 || *qps > 64 {
			return usageErrorf(cmd, "--qps %d: want 1 to 64", *qps)
		}
		op, err := benchAtomicOp(fs, cmd, test, *atomicOp, *atomicType)
		if err != nil {
			return err
		}
		if *perftest && *qps != 1 && !*rdmaCM {
			return usageErrorf(cmd, "--perftest runs one queue pair, as the perftest tools without -q (--qps %d; -R runs more)", *qps)
		}
		if *perftest && *jsonOut {
			return usageErrorf(cmd, "--perftest and --json exclude each other")
		}
		if *gbits && !*perftest {
			return usageErrorf(cmd, "--report_gbits is for --perftest's table (xdproce's table is in Gb/s already)")
		}
		if err := checkBenchMode(cmd, *mode, *paths, args[0], set, *qps, *sweep, *seconds, *perftest); err != nil {
			return err
		}
		if *port <= 0 || *port > 65535 {
			return usageErrorf(cmd, "--port %d", *port)
		}
		var want roce.ConnectOptions
		if err := rf.applyTo(cmd, &want); err != nil {
			return err
		}
		if err := ccf.applyTo(cmd, &want); err != nil {
			return err
		}
		if len(args) == 2 {
			if err := checkAddr(cmd, "HOST", args[1], false); err != nil {
				return err
			}
		}
		if *mtu != 0 && roce.MTUFromBytes(*mtu) == 0 {
			return usageErrorf(cmd, "-m %d: want 256, 512, 1024, 2048 or 4096", *mtu)
		}
		if *gidx < -1 {
			return usageErrorf(cmd, "-x %d: want a GID index (see 'xdproce info')", *gidx)
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
		b := &bench{env: env, dev: dev.Device, test: test, name: args[0], size: n, iters: it, qps: *qps, op: op, set: set,
			sweep: *sweep, seconds: *seconds, mtu: dev.PathMTU(), mode: *mode, paths: *paths, rdmaCM: *rdmaCM, want: want}
		if *mtu != 0 {
			if m := roce.MTUFromBytes(*mtu); m < b.mtu {
				b.mtu = m
			} else if m > b.mtu {
				fmt.Fprintf(env.Stderr, "bench: -m %d is more than the path MTU of %s, %d; using %d\n", *mtu, dev.Name(), b.mtu.Bytes(), b.mtu.Bytes())
			}
		}
		if *gidx >= 0 {
			if b.sgid, err = dev.GID(*gidx); err != nil {
				return usageErrorf(cmd, "-x %d: %s has %d GIDs (see 'xdproce info')", *gidx, dev.Name(), len(dev.GIDs()))
			}
		}
		var res []benchResult
		switch {
		case *rdmaCM && len(args) == 2:
			res, err = b.clientCM(ctx, args[1], *port, *retry)
		case *rdmaCM:
			res, err = b.serverCM(ctx, *port)
		case len(args) == 2:
			res, err = b.client(ctx, args[1], *port, *retry)
		default:
			res, err = b.server(ctx, *port)
		}
		if err != nil {
			if *perftest {
				return fmt.Errorf("bench %s: %w (retransmissions %d)", args[0], interrupted(ctx, err), dev.Stats().Retransmits)
			}
			return fmt.Errorf("bench %s: %w", args[0], interrupted(ctx, err))
		}
		if *perftest {
			printPerftest(env, b, len(args) == 2, *gbits)
			return nil
		}
		if *jsonOut {
			for _, r := range res {
				out, _ := json.Marshal(r)
				fmt.Fprintf(env.Stdout, "%s\n", out)
			}
			return nil
		}
		printBench(env, res)
		return nil
	}
}

// benchParamFlags maps the flags of the parameters two xdproce ends agree
// on to the parameters' names.
var benchParamFlags = map[string]string{"size": "size", "s": "size", "iters": "iters", "n": "iters", "qps": "qps", "q": "qps", "a": "sweep", "D": "seconds",
	"mode": "mode", "paths": "paths"}

// checkBenchMode checks --mode and --paths: OOO mode runs write, one queue
// pair, one size, by iterations, in xdproce's table.
func checkBenchMode(cmd, mode string, paths int, test string, set []string, qps int, sweep bool, seconds int, perftest bool) error {
	switch {
	case mode != cm.ModeRC && mode != cm.ModeOOO:
		return usageErrorf(cmd, "--mode %q: want rc or ooo", mode)
	case paths < 1 || paths > roce.MaxOOOPaths:
		return usageErrorf(cmd, "--paths %d: want 1 to %d", paths, roce.MaxOOOPaths)
	case mode != cm.ModeOOO && slices.Contains(set, "paths"):
		return usageErrorf(cmd, "--paths is for --mode ooo")
	case mode != cm.ModeOOO:
		return nil
	case test != "write":
		return usageErrorf(cmd, "--mode ooo: %s is not built yet (write is)", test)
	case qps != 1:
		return usageErrorf(cmd, "--mode ooo runs one queue pair (--qps %d)", qps)
	case sweep, seconds != 0:
		return usageErrorf(cmd, "--mode ooo runs one size by iterations (not -a or -D)")
	case perftest:
		return usageErrorf(cmd, "--mode ooo has no perftest tool: xdproce's table (or --json) only")
	}
	return nil
}

// benchAtomicOp is the atomic operation --atomic-op and --atomic-type choose.
func benchAtomicOp(fs *flag.FlagSet, cmd string, test cm.PerftestTest, atomicOp, atomicType string) (toolpeer.AtomicOp, error) {
	var op toolpeer.AtomicOp
	switch strings.ToLower(atomicOp) {
	case "fetch_add", "fetch_and_add", "faa":
		op = toolpeer.FetchAndAdd
	case "cmp_swap", "cmp_and_swap", "cas":
		op = toolpeer.CmpAndSwap
	default:
		return "", usageErrorf(cmd, "--atomic-op %q: want fetch_add or cmp_swap", atomicOp)
	}
	if atomicType == "" {
		return op, nil
	}
	atomicOpSet := false
	fs.Visit(func(f *flag.Flag) { atomicOpSet = atomicOpSet || f.Name == "atomic-op" })
	switch t := toolpeer.AtomicOp(atomicType); {
	case test != cm.AtomicBW:
		return "", usageErrorf(cmd, "--atomic-type is for the atomic test")
	case t != toolpeer.FetchAndAdd && t != toolpeer.CmpAndSwap:
		return "", usageErrorf(cmd, "--atomic-type %q: want FETCH_AND_ADD or CMP_AND_SWAP", atomicType)
	case atomicOpSet && t != op:
		return "", usageErrorf(cmd, "--atomic-type %s and --atomic-op %s disagree (give one)", atomicType, atomicOp)
	default:
		return t, nil
	}
}
