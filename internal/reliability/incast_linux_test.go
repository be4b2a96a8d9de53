package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// incastRun is one incast: every sender's result and capture, the
// bottleneck's counters and the time from the first start to the last end.
type incastRun struct {
	res     []sendResult
	pcaps   []string
	bn      netlab.BottleneckStats
	elapsed time.Duration
}

// runIncast sends size bytes of src from each of members 1..n of a star
// to `serve` in member 0 at once, all with --cc cc, through the relay on
// member 0's leg (rc: its bottleneck, if any), and checks every file
// landed whole.
func runIncast(t *testing.T, bin, src string, size int64, want []byte, n int, rc netlab.RelayConfig, cc string) incastRun {
	t.Helper()
	s := netlab.StarT(t, netlab.StarConfig{Members: n + 1, Relays: map[int]netlab.RelayConfig{0: rc}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	recv := s.Members[0]
	serve := recv.NS.Command(ctx, bin, "serve", "--dev", recv.Name, "--link", "xsk", "--dir", dir, "--insecure")
	serr := new(testenv.Buffer)
	serve.Stdout, serve.Stderr = serr, serr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	awaitServing(t, serve, serr)
	defer func() { _ = serve.Process.Kill(); _ = serve.Wait() }()
	run := incastRun{res: make([]sendResult, n), pcaps: make([]string, n)}
	outs, eouts := make([]bytes.Buffer, n), make([]bytes.Buffer, n)
	errs := make([]error, n)
	cmds := make([]*exec.Cmd, n)
	pdir := t.TempDir()
	for i := range n {
		m := s.Members[i+1]
		run.pcaps[i] = filepath.Join(pdir, fmt.Sprintf("send%d.pcapng", i+1))
		args := []string{"send", "--dev", m.Name, "--link", "xsk", "--json", "--cc", cc,
			"--capture", run.pcaps[i], "--name", fmt.Sprintf("f%d.bin", i+1)}
		// XDPROCE_INCAST_SEND_ARGS: more flags for every sender, for
		// measuring (e.g. "--bdp 64KiB"); the assertions stay the same.
		args = append(args, strings.Fields(os.Getenv("XDPROCE_INCAST_SEND_ARGS"))...)
		cmds[i] = m.NS.Command(ctx, bin, append(args, recv.IPv4.String(), src)...)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &eouts[i]
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = cmds[i].Run() })
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	run.bn = s.Relays[0].Stats().Bottleneck
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("send from member %d: %v\n%s%s\nserve: %s", i+1, errs[i], outs[i].String(), eouts[i].String(), serr.String())
		}
		if err := json.Unmarshal(outs[i].Bytes(), &run.res[i]); err != nil {
			t.Fatalf("send %d printed %q: %v", i+1, outs[i].String(), err)
		}
		if run.res[i].CC != cc {
			t.Fatalf("send %d used congestion control %q, want %q", i+1, run.res[i].CC, cc)
		}
		checkFile(t, filepath.Join(dir, fmt.Sprintf("f%d.bin", i+1)), size, want)
	}
	return run
}

// jain is Jain's fairness index of xs: (Σx)² / (n Σx²), 1 when all equal.
func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// TestPrivilegedIncast: N senders (`xdproce send`, AF_XDP, each from its own
// member of a star) to one `serve` behind a bottleneck with RED-like ECN
// marking on the receiver's leg, with --cc dcqcn and --cc none. Every file
// lands whole. With none no data frame is ECN-capable, nothing is marked
// and no CNP comes back; with dcqcn the data frames are ECT(0), and a
// sender's capture shows CNPs only when the bottleneck marked frames. 2:1,
// 4 MiB each, queue 2048 frames. With -long: first one flow through the same relay without a
// bottleneck (its rate sets the bottleneck's: half of it), then 2:1 and
// 4:1 of 64 MiB each. Logged: bottleneck utilisation (frame bytes out of
// the queue over the bottleneck's rate × the longest sender's transfer
// time; the transfers start within the processes' start-up of each
// other), Jain's fairness over the senders' goodputs, tail drops as a
// share of frames, marks and CNPs.
func TestPrivilegedIncast(t *testing.T) {
	netlab.Privileged(t)
	size := int64(4 << 20)
	fanIn := []int{2}
	rate := int64(200_000_000)
	if *long {
		size, fanIn = 64<<20, []int{2, 4}
	}
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	src, want := randomFile(t, tmp, size)
	if *long {
		one := runIncast(t, bin, src, size, want, 1, netlab.RelayConfig{Seed: 3}, "none")
		r := float64(size) * 8 / one.res[0].Seconds
		rate = int64(r / 2)
		t.Logf("one flow unlimited: %.0f Mb/s goodput; bottleneck at half: %d Mb/s", r/1e6, rate/1_000_000)
	}
	bn := netlab.Bottleneck{Rate: rate, Queue: 256, MarkMin: 16, MarkMax: 128, MarkP: 0.2}
	if !*long {
		// The default run asserts only facts about marks and CNPs: a
		// deeper queue keeps its tail drops (and retry_cnt) out of it.
		bn.Queue = 2048
	}
	for _, n := range fanIn {
		for _, cc := range []string{"dcqcn", "none"} {
			t.Run(fmt.Sprintf("%d:1-%s", n, cc), func(t *testing.T) {
				run := runIncast(t, bin, src, size, want, n, netlab.RelayConfig{Seed: 5, Bottleneck: bn}, cc)
				good := make([]float64, n)
				cnps, busy := 0, 0.0
				for i, res := range run.res {
					good[i] = float64(size) * 8 / res.Seconds / 1e6
					busy = max(busy, res.Seconds)
					data, ect, c := ccCapture(t, run.pcaps[i])
					cnps += c
					if data == 0 {
						t.Fatalf("sender %d: no data frames in its capture", i+1)
					}
					switch {
					case cc == "none" && (ect != 0 || c != 0):
						t.Errorf("sender %d, --cc none: %d ECT(0) frames, %d CNPs; want none", i+1, ect, c)
					case cc == "dcqcn" && ect != data:
						t.Errorf("sender %d, --cc dcqcn: %d of %d data frames ECT(0)", i+1, ect, data)
					}
				}
				st := run.bn
				if cc == "none" && (st.ECT != 0 || st.Marked != 0) {
					t.Errorf("--cc none: %d ECN-capable frames at the bottleneck, %d marked", st.ECT, st.Marked)
				}
				if cnps > 0 && st.Marked == 0 {
					t.Errorf("%d CNPs came back with no frame marked", cnps)
				}
				util := float64(st.Bytes) * 8 / (float64(rate) * busy)
				drops := float64(st.TailDropped) / float64(max(st.Forwarded+st.TailDropped, 1))
				t.Logf("%d:1 --cc %s: %d × %d MiB, the longest transfer %.2f s (%.2f s with start-up); goodput Mb/s %.0f; bottleneck %d Mb/s utilisation %.0f %%, Jain %.3f, "+
					"tail drops %d of %d frames (%.3f %%), %d ECT, %d marked, deepest queue %d frames; %d CNPs back",
					n, cc, n, size>>20, busy, run.elapsed.Seconds(), good, rate/1_000_000, 100*util, jain(good),
					st.TailDropped, st.Forwarded+st.TailDropped, 100*drops, st.ECT, st.Marked, st.MaxFrames, cnps)
			})
		}
	}
}
