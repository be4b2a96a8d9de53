package reliability

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/netlab"
)

// ifaceBytes returns the rx and tx byte counters of the interface e (read
// in its namespace, /sys/class/net/IF/statistics).
func ifaceBytes(t *testing.T, e *netlab.Iface) (rx, tx uint64) {
	t.Helper()
	read := func(name string) uint64 {
		out, err := e.NS.Command(t.Context(), "cat", "/sys/class/net/"+e.Name+"/statistics/"+name).Output()
		if err != nil {
			t.Fatalf("%s of %s: %v", name, e.Name, err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return read("rx_bytes"), read("tx_bytes")
}

// copyResult is what `copy --json` prints.
type copyResult struct {
	Size    int64   `json:"size"`
	Seconds float64 `json:"seconds"`
	SHA256  string  `json:"sha256"`
	Op      string  `json:"op"`
	OOO     struct {
		Attempts  uint64 `json:"attempts"`
		Delivered uint64 `json:"delivered"`
		Retries   uint64 `json:"retries"`
	} `json:"ooo"`
}

// copyLab is a star of 3 namespaces: `serve` in m1 (the source, holding a
// random file) and m2 (the sink), both with a pre-shared key over AF_XDP,
// and `copy` run from m0.
type copyLab struct {
	bin, key, tmp  string
	c, s, d        *netlab.Iface
	srcDir, dstDir string
	name           string
	want           []byte
	ctx            context.Context
	logs           []*bytes.Buffer
}

func newCopyLab(t *testing.T, cfg netlab.StarConfig, size int64) *copyLab {
	t.Helper()
	l := &copyLab{tmp: t.TempDir(), srcDir: t.TempDir(), dstDir: t.TempDir()}
	l.bin = buildCLI(t, l.tmp)
	cfg.Members = 3
	st := netlab.StarT(t, cfg)
	l.c, l.s, l.d = st.Members[0], st.Members[1], st.Members[2]
	l.key = filepath.Join(l.tmp, "key")
	if _, err := cm.WritePSK(l.key); err != nil {
		t.Fatal(err)
	}
	var src string
	src, l.want = randomFile(t, l.srcDir, size)
	l.name = filepath.Base(src)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	l.ctx = ctx
	for _, m := range []struct {
		e   *netlab.Iface
		dir string
	}{{l.s, l.srcDir}, {l.d, l.dstDir}} {
		cmd := m.e.NS.Command(ctx, l.bin, "serve", "--dev", m.e.Name, "--link", "xsk", "--dir", m.dir, "--psk-file", l.key)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		l.logs = append(l.logs, &out)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	return l
}

// run runs `copy --link xsk ARGS` in the controller's namespace.
func (l *copyLab) run(args ...string) (string, string, error) {
	cmd := l.c.NS.Command(l.ctx, l.bin, append([]string{"copy", "--link", "xsk"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// copyJSON runs copy --json with the key from the source's file to the
// sink's NEW and checks the stored file.
func (l *copyLab) copyJSON(t *testing.T, to string) copyResult {
	t.Helper()
	out, errOut, err := l.run("--psk-file", l.key, "--json", l.s.IPv4.String()+":"+l.name, l.d.IPv4.String()+":"+to)
	if err != nil {
		t.Fatalf("copy: %v\n%s%s\nsource: %s\nsink: %s", err, out, errOut, l.logs[0], l.logs[1])
	}
	var res copyResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("copy --json printed %q: %v", out, err)
	}
	got, err := os.ReadFile(filepath.Join(l.dstDir, to))
	if err != nil {
		t.Fatalf("stored file: %v (sink: %s)", err, l.logs[1])
	}
	if h := sha256.Sum256(got); !bytes.Equal(h[:], l.want) || res.Size != int64(len(got)) {
		t.Fatalf("stored %d bytes with SHA-256 %x, want %x", len(got), h, l.want)
	}
	return res
}

// TestPrivilegedCopyStar: in a star of 3 namespaces, `xdproce copy` run in
// the controller's (m0, no --dev: the route's interface) moves a 16 MiB file
// (100 MiB with -long) from `serve` in m1 to `serve` in m2, both
// authenticating with a pre-shared key, over AF_XDP: byte-exact at the sink,
// and the controller's interface carries less than 1 % of the file's bytes
// both ways. A controller with another key is refused in the hello and
// nothing is stored. The same over IPv6 ([ADDR]:PORT:NAME forms).
func TestPrivilegedCopyStar(t *testing.T) {
	netlab.Privileged(t)
	size := int64(16 << 20)
	if *long {
		size = 100 << 20
	}
	l := newCopyLab(t, netlab.StarConfig{}, size)
	c, s, d, name, tmp, run, dstDir := l.c, l.s, l.d, l.name, l.tmp, l.run, l.dstDir
	from, to := s.IPv4.String()+":"+name, d.IPv4.String()+":copy.bin"

	// Another key: refused in the hello, nothing stored.
	bad := filepath.Join(tmp, "bad")
	if _, err := cm.WritePSK(bad); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := run("--psk-file", bad, from, to); err == nil {
		t.Fatalf("copy with another key succeeded: %s", out)
	} else {
		t.Logf("another key: %s", strings.TrimSpace(errOut))
	}
	if _, err := os.Stat(filepath.Join(dstDir, "copy.bin")); !os.IsNotExist(err) {
		t.Fatalf("stored after a refused copy: %v", err)
	}

	rx0, tx0 := ifaceBytes(t, c)
	res := l.copyJSON(t, "copy.bin")
	rx1, tx1 := ifaceBytes(t, c)
	got, err := os.ReadFile(filepath.Join(dstDir, "copy.bin"))
	if err != nil {
		t.Fatal(err)
	}
	through := (rx1 - rx0) + (tx1 - tx0)
	t.Logf("%d MiB in %.3f s (%.1f MB/s), %d operations (%d retries); the controller's interface carried %d bytes (rx %d, tx %d): %.3f %% of the file",
		size>>20, res.Seconds, float64(size)/res.Seconds/1e6, res.OOO.Delivered, res.OOO.Retries, through, rx1-rx0, tx1-tx0,
		100*float64(through)/float64(size))
	if float64(through) >= 0.01*float64(size) {
		t.Errorf("the controller's interface carried %d bytes, ≥ 1 %% of %d", through, size)
	}
	if res.Op != "OOO third-party READ" || res.OOO.Delivered == 0 {
		t.Errorf("copy result %+v", res)
	}
	// IPv6, with the bracketed forms and the default port given.
	from6 := "[" + s.IPv6.String() + "]:18515:" + name
	if out, errOut, err := run("--psk-file", l.key, from6, "["+d.IPv6.String()+"]:copy6.bin"); err != nil {
		t.Fatalf("copy over IPv6: %v\n%s%s", err, out, errOut)
	} else if !strings.Contains(out, "sha256 "+res.SHA256+" verified") || !strings.Contains(out, "not through this side") {
		t.Errorf("copy printed %q", out)
	}
	if got6, err := os.ReadFile(filepath.Join(dstDir, "copy6.bin")); err != nil || !bytes.Equal(got6, got) {
		t.Fatalf("IPv6 copy: %d bytes, %v", len(got6), err)
	}
	if *long {
		relayFigure(t, l.ctx, l.bin, l.key, c, s, d, name, size, res.Seconds)
	}
}

// relayFigure is the comparison for docs/status.md: the same file fetched
// by the controller (`get`) then sent on (`send`), both through its
// interface, against the copy's seconds.
func relayFigure(t *testing.T, ctx context.Context, bin, key string, c, s, d *netlab.Iface, name string, size int64, copySec float64) {
	t.Helper()
	local := filepath.Join(t.TempDir(), "relay.bin")
	rx0, tx0 := ifaceBytes(t, c)
	var secs []float64
	for _, args := range [][]string{
		{"get", "--dev", c.Name, "--link", "xsk", "--psk-file", key, "--json", s.IPv4.String(), name, local},
		{"send", "--dev", c.Name, "--link", "xsk", "--psk-file", key, "--json", "--name", "relay.bin", d.IPv4.String(), local},
	} {
		cmd := c.NS.Command(ctx, bin, args...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, out)
		}
		var r copyResult
		if err := json.Unmarshal(out, &r); err != nil || r.Size != size {
			t.Fatalf("%s --json printed %q: %v", args[0], out, err)
		}
		secs = append(secs, r.Seconds)
	}
	rx1, tx1 := ifaceBytes(t, c)
	through := (rx1 - rx0) + (tx1 - tx0)
	t.Logf("figure: copy %.3f s (%.1f MB/s); get %.3f s + send %.3f s = %.3f s (%.1f MB/s) with %d bytes (%.0f %% of the file) through the controller's interface",
		copySec, float64(size)/copySec/1e6, secs[0], secs[1], secs[0]+secs[1], float64(size)/(secs[0]+secs[1])/1e6,
		through, 100*float64(through)/float64(size))
}

// TestPrivilegedCopyLossy: with 1 % loss both ways on the sink's leg (the
// source's data and the sink's completions), copy retries what is lost,
// with smaller operations, and the file arrives byte-exact.
func TestPrivilegedCopyLossy(t *testing.T) {
	netlab.Privileged(t)
	l := newCopyLab(t, netlab.StarConfig{Relays: map[int]netlab.RelayConfig{2: {Seed: 16, Loss: 0.01}}}, 16<<20)
	res := l.copyJSON(t, "lossy.bin")
	t.Logf("16 MiB at 1 %% loss in %.3f s: %d attempts, %d delivered, %d retries", res.Seconds, res.OOO.Attempts, res.OOO.Delivered, res.OOO.Retries)
	if res.OOO.Retries == 0 || res.OOO.Attempts != res.OOO.Delivered+res.OOO.Retries {
		t.Errorf("at 1 %% loss: %+v", res.OOO)
	}
}
