package reliability

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
)

// TestPrivilegedTransferAB measures (asserts nothing about speed) `send` and
// `get` of 64 MiB by two xdproce binaries, named by XDPROCE_AB_BEFORE and
// XDPROCE_AB_AFTER (each serving and running the client for its own
// rounds), alternated over one veth pair and over one clean relay
// (XDPROCE_AB_PATHS: "veth", "relay" or both, the default),
// XDPROCE_AB_ROUNDS rounds each (default 3): per binary, direction and
// path the median MB/s and CPU time, the after/before ratio paired by round
// (pairedRatio), and per round what the clients' device counters say about
// loss recovery (abCounters). It checks every copy's SHA-256.
// Without both binaries it skips: a measurement, run by hand
// (docs/status.md says how the lmrm figures were taken).
func TestPrivilegedTransferAB(t *testing.T) {
	before, after := os.Getenv("XDPROCE_AB_BEFORE"), os.Getenv("XDPROCE_AB_AFTER")
	if before == "" || after == "" {
		t.Skip("a measurement: set XDPROCE_AB_BEFORE and XDPROCE_AB_AFTER to two xdproce binaries")
	}
	netlab.Privileged(t)
	const size = 64 << 20
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("XDPROCE_AB_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	tmp := t.TempDir()
	src, want := randomFile(t, tmp, size)
	paths := []string{"veth", "relay"}
	if p := os.Getenv("XDPROCE_AB_PATHS"); p != "" {
		paths = strings.Split(p, ",")
	}
	for _, path := range paths {
		var topo *netlab.Topo
		switch path {
		case "veth":
			topo = netlab.Pair(t, netlab.LinkConfig{})
		case "relay":
			topo = netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Seed: 1})
		default:
			t.Fatalf("XDPROCE_AB_PATHS: %q is not veth or relay", path)
		}
		rates := map[string][]float64{}
		ops := map[string]string{}
		for round := range rounds {
			order := []struct{ name, bin string }{{"before", before}, {"after", after}}
			if round%2 == 1 {
				slices.Reverse(order) // neither binary always runs first
			}
			for _, b := range order {
				ab := abRound(t, b.bin, topo, src, size, want)
				for _, m := range abMetrics {
					rates[b.name+" "+m.name] = append(rates[b.name+" "+m.name], m.value(&ab, size))
				}
				ops[b.name] = ab.send.Op + " / " + ab.get.Op
				t.Logf("%s round %d %s: send %.1f MB/s, get %.1f MB/s, CPU %v (the get's: client %v, serve %v, this process %v); send client %s; get client %s", path, round, b.name,
					float64(size)/ab.send.Seconds/1e6, float64(size)/ab.get.Seconds/1e6, ab.cpu, ab.getClient, ab.getServe, ab.getSelf, ab.sendCtr, ab.getCtr)
			}
		}
		t.Logf("%s: before is %s, after is %s", path, ops["before"], ops["after"])
		for _, m := range abMetrics {
			b, a := rates["before "+m.name], rates["after "+m.name]
			gm, lo, hi := pairedRatio(b, a)
			t.Logf("%s %s: median %.3g → %.3g %s; after/before paired by round %.3f (95%% %.3f–%.3f)", path, m.name,
				median(b), median(a), m.unit, gm, lo, hi)
		}
	}
}

// abMetrics are what TestPrivilegedTransferAB reports of each round.
var abMetrics = []struct {
	name, unit string
	value      func(ab *abResult, size int64) float64
}{
	{"send", "MB/s", func(ab *abResult, size int64) float64 { return float64(size) / ab.send.Seconds / 1e6 }},
	{"get", "MB/s", func(ab *abResult, size int64) float64 { return float64(size) / ab.get.Seconds / 1e6 }},
	{"cpu", "CPU s (send and get, serve and both clients)", func(ab *abResult, _ int64) float64 { return ab.cpu.Seconds() }},
	{"get client cpu", "CPU s", func(ab *abResult, _ int64) float64 { return ab.getClient.Seconds() }},
	{"get serve cpu", "CPU s", func(ab *abResult, _ int64) float64 { return ab.getServe.Seconds() }},
	{"get relay cpu", "CPU s (this test process: the relay's, on that path)", func(ab *abResult, _ int64) float64 { return ab.getSelf.Seconds() }},
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// pairedRatio is the geometric mean of after[i]/before[i] (the two
// binaries' figures in round i, which ran back to back) and its 95 %
// interval (the mean log ratio ± 2 standard errors): pairing by round takes
// out the machine's drift from round to round, which on a shared 2-vCPU
// machine is larger than most differences measured.
func pairedRatio(before, after []float64) (gm, lo, hi float64) {
	n := min(len(before), len(after))
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	d := make([]float64, n)
	var mean float64
	for i := range n {
		d[i] = math.Log(after[i] / before[i])
		mean += d[i] / float64(n)
	}
	if n < 2 {
		return math.Exp(mean), math.NaN(), math.NaN()
	}
	var ss float64
	for _, x := range d {
		ss += (x - mean) * (x - mean)
	}
	se := math.Sqrt(ss/float64(n-1)) / math.Sqrt(float64(n))
	return math.Exp(mean), math.Exp(mean - 2*se), math.Exp(mean + 2*se)
}

// abResult is one round of one binary: the two results, the CPU time
// (user and system) of the server and the two clients together, and that
// of the get alone in its client, in the server and in this process (the
// relay's, on that path).
type abResult struct {
	send, get                    sendResult
	cpu                          time.Duration
	getClient, getServe, getSelf time.Duration
	sendCtr, getCtr              string // abCounters of each client
}

// abCounters picks from a client's debug log (its "device stats" line,
// written as it closes the device) the frames it sent and received and,
// where the binary logs them, its queue pair's loss-recovery counters: for
// get the client receives, so its tx frames are its ACKs (or READ
// requests) and its duplicates the packets the server sent twice.
func abCounters(log string) string {
	var line string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="device stats"`) {
			line = l
		}
	}
	var out []string
	for _, f := range strings.Fields(line) {
		k, _, _ := strings.Cut(f, "=")
		switch k {
		case "tx_frames", "rx_frames", "retransmits", "timeouts", "seq_naks", "duplicates", "qp_dropped":
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return "(no device stats)"
	}
	return strings.Join(out, " ")
}

// abRound runs serve from bin in topo's B, then `send` of src and `get` of
// it back from A, and checks both copies.
func abRound(t *testing.T, bin string, topo *netlab.Topo, src string, size int64, want []byte) (ab abResult) {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "serve")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir) // 128 MiB a round: keep the page cache from filling up
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	serve, serr := startServe(ctx, t, bin, topo, dir)
	defer func() {
		_ = serve.Process.Kill()
		_ = serve.Wait()
		ab.cpu += serve.ProcessState.UserTime() + serve.ProcessState.SystemTime()
	}()
	run := func(ctr *string, cpu *time.Duration, args ...string) sendResult {
		cmd := topo.A.NS.Command(ctx, bin, append([]string{args[0], "--log-level", "debug"}, args[1:]...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s%s\nserve: %s", args, err, out.String(), errb.String(), serr.String())
		}
		used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		ab.cpu += used
		if cpu != nil {
			*cpu = used
		}
		*ctr = abCounters(errb.String())
		var res sendResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v printed %q: %v", args, out.String(), err)
		}
		return res
	}
	host := topo.B.IPv4.String()
	ab.send = run(&ab.sendCtr, nil, "send", "--dev", topo.A.Name, "--link", "xsk", "--name", "got.bin", "--json", host, src)
	checkFile(t, filepath.Join(dir, "got.bin"), size, want)
	back := filepath.Join(dir, "back.bin") // beside the served file, removed with it
	before, self := taskCPU(t, serve.Process.Pid), taskCPU(t, os.Getpid())
	ab.get = run(&ab.getCtr, &ab.getClient, "get", "--dev", topo.A.Name, "--link", "xsk", "--json", host, "got.bin", back)
	ab.getServe, ab.getSelf = taskCPU(t, serve.Process.Pid)-before, taskCPU(t, os.Getpid())-self
	checkFile(t, back, size, want)
	return ab
}

func checkFile(t *testing.T, path string, size int64, want []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(b); int64(len(b)) != size || !bytes.Equal(got[:], want) {
		t.Fatalf("%s: %d bytes with SHA-256 %x, want %d bytes with %x", path, len(b), got, size, want)
	}
}

// taskCPU is the CPU time pid's threads have used so far (the first field
// of each /proc/PID/task/TID/schedstat, in nanoseconds; threads that
// ended are not counted, which for a Go program's long-lived threads
// is close enough for a measurement).
func taskCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("schedstat of %d: %v (none found)", pid, err)
	}
	var sum time.Duration
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err == nil {
				sum += time.Duration(ns)
			}
		}
	}
	return sum
}

func TestPairedRatio(t *testing.T) {
	gm, lo, hi := pairedRatio([]float64{100, 50, 200}, []float64{110, 55, 220})
	if math.Abs(gm-1.1) > 1e-9 || math.Abs(lo-1.1) > 1e-9 || math.Abs(hi-1.1) > 1e-9 {
		t.Errorf("every round 10 %% up: %v (%v–%v), want 1.1 (1.1–1.1)", gm, lo, hi)
	}
	// Rounds of 2× and ½× average out to 1; log ratios ±ln 2: standard
	// deviation √2 ln 2, standard error ln 2, the interval ¼–4.
	gm, lo, hi = pairedRatio([]float64{1, 4}, []float64{2, 2})
	const w = 4.0
	if math.Abs(gm-1) > 1e-9 || math.Abs(lo-1/w) > 1e-9 || math.Abs(hi-w) > 1e-9 {
		t.Errorf("2× and ½×: %v (%v–%v), want 1 (%v–%v)", gm, lo, hi, 1/w, w)
	}
	if gm, _, _ := pairedRatio(nil, nil); !math.IsNaN(gm) {
		t.Errorf("no rounds: %v, want NaN", gm)
	}
}
