package reliability

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
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
// XDPROCE_AB_ROUNDS rounds each (default 3): median MB/s per binary,
// direction and path, and per round what the clients' device counters say
// about loss recovery (abCounters). It checks every copy's SHA-256.
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
				add := func(k string, v float64) { rates[b.name+" "+k] = append(rates[b.name+" "+k], v) }
				add("send", float64(size)/ab.send.Seconds/1e6)
				add("get", float64(size)/ab.get.Seconds/1e6)
				add("cpu", ab.cpu.Seconds())
				ops[b.name] = ab.send.Op + " / " + ab.get.Op
				t.Logf("%s round %d %s: send %.1f MB/s, get %.1f MB/s, CPU %v; send client %s; get client %s", path, round, b.name,
					float64(size)/ab.send.Seconds/1e6, float64(size)/ab.get.Seconds/1e6, ab.cpu, ab.sendCtr, ab.getCtr)
			}
		}
		for _, k := range []string{"before send", "after send", "before get", "after get", "before cpu", "after cpu"} {
			r := slices.Sorted(slices.Values(rates[k]))
			unit := "MB/s"
			if strings.HasSuffix(k, "cpu") {
				unit = "CPU s for both transfers, both processes"
			}
			t.Logf("%s %s: median %.2f %s (all %.2f) by %s", path, k, r[len(r)/2], unit, r, ops[strings.Fields(k)[0]])
		}
	}
}

// abResult is one round of one binary: the two results, and the CPU time
// (user and system) of the server and the two clients together.
type abResult struct {
	send, get       sendResult
	cpu             time.Duration
	sendCtr, getCtr string // abCounters of each client
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
	run := func(ctr *string, args ...string) sendResult {
		cmd := topo.A.NS.Command(ctx, bin, append([]string{args[0], "--log-level", "debug"}, args[1:]...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s%s\nserve: %s", args, err, out.String(), errb.String(), serr.String())
		}
		ab.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		*ctr = abCounters(errb.String())
		var res sendResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v printed %q: %v", args, out.String(), err)
		}
		return res
	}
	host := topo.B.IPv4.String()
	ab.send = run(&ab.sendCtr, "send", "--dev", topo.A.Name, "--link", "xsk", "--name", "got.bin", "--json", host, src)
	checkFile(t, filepath.Join(dir, "got.bin"), size, want)
	back := filepath.Join(dir, "back.bin") // beside the served file, removed with it
	ab.get = run(&ab.getCtr, "get", "--dev", topo.A.Name, "--link", "xsk", "--json", host, "got.bin", back)
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
