package reliability

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// buildCLI builds cmd/xdproce into dir and returns its path.
func buildCLI(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go on PATH: %v", err)
	}
	bin := filepath.Join(dir, "xdproce")
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/xdproce/xdproce/cmd/xdproce")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startServe starts `bin serve --insecure` over AF_XDP in topo's B,
// storing into dir, its output going to the returned log, and waits until
// it serves; the caller kills it and waits.
func startServe(ctx context.Context, t *testing.T, bin string, topo *netlab.Topo, dir string) (*exec.Cmd, *testenv.Buffer) {
	t.Helper()
	serve := topo.B.NS.Command(ctx, bin, "serve", "--dev", topo.B.Name, "--link", "xsk", "--dir", dir, "--insecure")
	serr := new(testenv.Buffer)
	serve.Stdout, serve.Stderr = serr, serr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	awaitServing(t, serve, serr)
	return serve, serr
}

// awaitServing waits, up to a minute, for serve's "serving on" line (or
// its error, which fails the test). A client started before it finds the
// control port closed, and its connect retries (5 s) can run out while a
// loaded machine is still starting serve: seen once in CI, where
// TestPrivilegedOOORelay's send was refused for 5 s.
func awaitServing(t *testing.T, serve *exec.Cmd, out *testenv.Buffer) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(time.Minute)
	for {
		s := out.String()
		switch {
		case strings.Contains(s, "serving on"):
			if d := time.Since(start); d > time.Second {
				t.Logf("serve took %v to start serving", d.Round(time.Millisecond))
			}
			return
		case strings.Contains(s, "xdproce: "), time.Now().After(deadline):
			_ = serve.Process.Kill()
			_ = serve.Wait()
			t.Fatalf("serve did not start serving: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPrivilegedRelaySend: `xdproce send` of a random file to `xdproce
// serve` through the faulty relay (5 % loss, 2 % reorder, 1 % duplication,
// 0.1 % corruption each way) over AF_XDP arrives with the right SHA-256;
// the same through a clean relay gives the goodput to compare (the rate
// send itself reports with --json). 256 MiB (64 MiB with -short).
func TestPrivilegedRelaySend(t *testing.T) {
	netlab.Privileged(t)
	size := int64(256 << 20)
	if testing.Short() {
		size = 64 << 20
	}
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	src := filepath.Join(tmp, "payload.bin")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := h.Sum(nil)
	var rate [2]float64
	for i, rc := range []netlab.RelayConfig{{Seed: 5}, faultyRelay(5)} {
		name := map[int]string{0: "clean", 1: "faulty"}[i]
		t.Run(name, func(t *testing.T) {
			topo := netlab.Relayed(t, netlab.LinkConfig{}, rc)
			dir := filepath.Join(tmp, name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			serve, serr := startServe(ctx, t, bin, topo, dir)
			t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
			start := time.Now()
			send := topo.A.NS.Command(ctx, bin, "send", "--dev", topo.A.Name, "--link", "xsk", "--name", "got.bin", "--json",
				topo.B.IPv4.String(), src)
			var sout, sstderr bytes.Buffer
			send.Stdout, send.Stderr = &sout, &sstderr
			err := send.Run()
			el := time.Since(start)
			if err != nil {
				t.Fatalf("send: %v\n%s%s\nserve: %s", err, sout.String(), sstderr.String(), serr.String())
			}
			var res struct {
				Size    int64   `json:"size"`
				Seconds float64 `json:"seconds"`
				Gbps    float64 `json:"gbps"`
				SHA256  string  `json:"sha256"`
			}
			if err := json.Unmarshal(sout.Bytes(), &res); err != nil {
				t.Fatalf("send --json printed %q: %v", sout.String(), err)
			}
			g, err := os.Open(filepath.Join(dir, "got.bin"))
			if err != nil {
				t.Fatalf("received file: %v (serve: %s)", err, serr.String())
			}
			gh := sha256.New()
			n, _ := io.Copy(gh, g)
			g.Close()
			if n != size || !bytes.Equal(gh.Sum(nil), want) {
				t.Fatalf("received %d bytes with SHA-256 %x, want %d bytes with %x", n, gh.Sum(nil), size, want)
			}
			if res.SHA256 != hex.EncodeToString(want) || res.Size != size {
				t.Errorf("send reported %d bytes, SHA-256 %s", res.Size, res.SHA256)
			}
			rate[i] = float64(size) / res.Seconds / 1e6
			t.Logf("%s relay: %d MiB in %.3f s as send reports it (%.1f MB/s, %.2f Gb/s); %v with start-up; SHA-256 %x verified",
				name, size>>20, res.Seconds, rate[i], res.Gbps, el.Round(time.Millisecond), want[:8])
			t.Logf("relay %+v", topo.Relay.Stats())
		})
	}
	if rate[0] > 0 && rate[1] > 0 {
		t.Logf("xdproce send %d MiB: faulty relay %.1f MB/s = %.0f %% of the clean relay's %.1f MB/s", size>>20, rate[1],
			100*rate[1]/rate[0], rate[0])
	}
}
