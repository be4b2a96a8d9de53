package enlarge

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkConnections opens conns connections between two roce devices over
// link/pipe (one channel end on each device, one small message over each) and
// reports:
//
//   - regB/conn: every byte both ends have registered for them (rings,
//     mailboxes, send buffers, and the two shared send pools) divided by
//     conns;
//   - rssB/conn: the growth of the resident set of a separate process (this
//     test binary re-executed, one per sub-benchmark, so the modes do not skew
//     each other) that opens the same connections and writes to every page of
//     every registered buffer, divided by conns. It includes everything a
//     connection costs (queue pairs, completion queues, channel state), not
//     only the buffers.
//
// The timed loop opens, pings and closes the connections.
func BenchmarkConnections(b *testing.B) {
	for _, mode := range []Mode{Enlarge, Baseline} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("mode=%v/conns=%d", mode, n), func(b *testing.B) {
				rss, err := rssChild(mode, n)
				if err != nil {
					b.Fatal(err)
				}
				reg := 0
				for b.Loop() {
					l := newDevLab(b, &Config{Mode: mode}, n)
					l.pingAll(b, 100)
					reg = l.registered()
					l.close()
				}
				b.ReportMetric(float64(reg)/float64(n), "regB/conn")
				b.ReportMetric(rss, "rssB/conn")
			})
		}
	}
}

const rssEnv = "XDPROCE_ENLARGE_RSS_CHILD"

// heapEnv names a file the child writes a heap profile to while its
// connections are open (run it with -test.memprofilerate=64 to see the
// small allocations: go tool pprof -sample_index=inuse_space).
const heapEnv = "XDPROCE_ENLARGE_HEAP_PROFILE"

func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

// rssChild runs TestConnectionsRSSChild in a new process and returns what it
// measured.
func rssChild(mode Mode, n int) (float64, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnectionsRSSChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%v:%d", rssEnv, mode, n))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("rss child: %w\n%s", err, out.String())
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "RSS_PER_CONN" {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("rss child printed no result:\n%s", out.String())
}

// TestConnectionsRSSChild is the child process of BenchmarkConnections; it
// does nothing unless XDPROCE_ENLARGE_RSS_CHILD=mode:conns is set
// (mode:conns:slots measures a phase-0 ring of that many slots).
func TestConnectionsRSSChild(t *testing.T) {
	spec := os.Getenv(rssEnv)
	if spec == "" {
		t.Skip("runs only as BenchmarkConnections' child process")
	}
	modeName, count, _ := strings.Cut(spec, ":")
	count, slots, _ := strings.Cut(count, ":")
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{}
	if slots != "" {
		if cfg.RingSlots, err = strconv.Atoi(slots); err != nil {
			t.Fatal(err)
		}
	}
	mode := Enlarge
	if modeName == Baseline.String() {
		mode = Baseline
	}
	runtime.GC()
	debug.FreeOSMemory()
	before := rss(t)
	start := time.Now()
	cfg.Mode = mode
	l := newDevLab(t, &cfg, n)
	l.pingAll(t, 100)
	touch := func(b []byte) {
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		if len(b) > 0 {
			b[len(b)-1] = 1
		}
	}
	// The channels are quiet (every message consumed), so nothing is
	// reading or writing these buffers now.
	touch(l.poolA.r.Bytes())
	touch(l.poolB.r.Bytes())
	for _, c := range l.conns {
		for _, ch := range []*Channel{c.a, c.b} {
			touch(ch.mb.Bytes())
			touch(ch.rx.ring.Bytes())
			if ch.tx.stage != nil {
				touch(ch.tx.stage.Bytes())
			}
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	after := rss(t)
	if path := os.Getenv(heapEnv); path != "" {
		writeHeapProfile(t, path)
	}
	fmt.Printf("RSS_PER_CONN %.1f\n", float64(after-before)/float64(n))
	fmt.Printf("# %v ring slots %d, conns=%d rss %d → %d B, registered %d B, %v\n", mode, l.cfg.RingSlots, n, before, after, l.registered(), time.Since(start))
	runtime.KeepAlive(l)
}

// rss reads the resident set size from /proc/self/status.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkStream moves messages of each size from one end to the other
// between two roce devices over link/pipe with blocking Write and Read (the
// direction promotes as the size needs). The default ring starts at 4 slots
// and grows to 16 on the first burst; size=64 also runs with rings that do
// not grow, of 16 slots (what the ring was before it grew on demand) and of 4,
// to show what the growth buys.
func BenchmarkStream(b *testing.B) {
	type variant struct {
		name string
		cfg  Config
	}
	for _, size := range []int{64, 1024, 4096, 65536} {
		variants := []variant{{fmt.Sprintf("size=%d", size), Config{LargeSlots: 4}}}
		if size == 64 {
			variants = append(variants,
				variant{"size=64/ring=16-fixed", Config{LargeSlots: 4, RingSlots: 16, GrowSlots: -1}},
				variant{"size=64/ring=4-fixed", Config{LargeSlots: 4, RingSlots: 4, GrowSlots: -1}})
		}
		for _, v := range variants {
			benchStream(b, v.name, &v.cfg, size)
		}
	}
}

func benchStream(b *testing.B, name string, cfg *Config, size int) {
	b.Run(name, func(b *testing.B) {
		l := newDevLab(b, cfg, 1)
		c := l.conns[0]
		msg := payload(size, 1)
		buf := make([]byte, size)
		// promote before timing (the reader must run for the writer's
		// request to be answered)
		go c.a.Write(msg)
		if _, err := c.b.Read(buf); err != nil {
			b.Fatal(err)
		}
		errc := make(chan error, 1)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		b.ResetTimer()
		go func() {
			for i := 0; i < b.N; i++ {
				if _, err := c.a.Write(msg); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		for i := 0; i < b.N; i++ {
			if n, err := c.b.Read(buf); err != nil || n != size {
				b.Fatalf("read %d: %v", n, err)
			}
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s := c.a.Stats()
		b.ReportMetric(float64(s.SendPhase), "phase")
	})
}
