package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// readmeSetcap returns the capabilities of the README's setcap line
// ("cap_net_admin,...+ep").
func readmeSetcap(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`sudo setcap (\\S+) bin/xdproce`").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no `sudo setcap CAPS bin/xdproce` line")
	}
	return string(m[1])
}

// capsBinary copies the binary into dir (mode 0755) and gives the copy the
// file capabilities caps.
func capsBinary(t *testing.T, dir, name, caps string) string {
	t.Helper()
	setcap := testenv.Tool(t, "setcap", "install libcap2-bin")
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(setcap, caps, bin).CombinedOutput(); err != nil {
		t.Fatalf("setcap %s %s: %v: %s", caps, bin, err, out)
	}
	return bin
}

// TestPrivilegedREADMECapabilities: the binary with exactly the README's file
// capabilities, run as nobody with no inherited capabilities, sends a file
// over AF_XDP (--link xsk) byte-exact and says AF_XDP, and its info says
// AF_XDP is available. With CAP_BPF left out of the file's set, the error
// names CAP_BPF as missing and no capability the process has.
func TestPrivilegedREADMECapabilities(t *testing.T) {
	testenv.Privileged(t)
	setpriv := testenv.Tool(t, "setpriv", "install util-linux")
	dir, err := os.MkdirTemp("", "xdproce-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NOSUID != 0 {
		testenv.Skipf(t, "%s is on a nosuid filesystem, where file capabilities are ignored (set TMPDIR elsewhere)", dir)
	}
	caps := readmeSetcap(t)
	bin := capsBinary(t, dir, "xdproce", caps)
	src := filepath.Join(dir, "data")
	data := writeFile(t, src, 1<<20, 7)

	topo := netlab.Pair(t, netlab.LinkConfig{})
	s := startServer(t, topo)
	waitOutput(t, &s.errb, "serving on")
	asNobody := func(bin string, args ...string) result {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		full := append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin}, args...)
		return runCmd(t, topo.B.NS.Command(ctx, setpriv, full...))
	}

	r := asNobody(bin, "send", "--dev", topo.B.Name, "--link", "xsk", topo.A.IPv4.String(), src)
	if r.code != 0 || !strings.Contains(r.stdout, "by RDMA WRITE WITH IMMEDIATE (lmrm) over AF_XDP") {
		t.Fatalf("send as nobody with %s: exit %d\nstdout %s\nstderr %s\nserver %s", caps, r.code, r.stdout, r.stderr, s.errb.String())
	}
	t.Logf("send as nobody with %s: %s", caps, strings.TrimSpace(r.stdout))
	if got, err := os.ReadFile(filepath.Join(s.dir, "data")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("stored %d bytes (%v), want %d byte-exact", len(got), err, len(data))
	}
	r = asNobody(bin, "info", topo.B.Name)
	if r.code != 0 || !strings.Contains(r.stdout, "AF_XDP: yes\n") || strings.Contains(r.stdout, "privileges:") {
		t.Errorf("info as nobody with %s: exit %d\n%s%s", caps, r.code, r.stdout, r.stderr)
	}

	// Without CAP_BPF: the hint names what is missing, not what is there.
	noBPF := capsBinary(t, dir, "xdproce-nobpf", strings.Replace(caps, "cap_bpf,", "", 1))
	r = asNobody(noBPF, "send", "--dev", topo.B.Name, "--link", "xsk", topo.A.IPv4.String(), src)
	oneErrorLine(t, "send without CAP_BPF", r, 1, "AF_XDP: missing CAP_BPF: permission denied; run as root")
	for _, has := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK"} {
		if strings.Contains(r.stderr, has) {
			t.Errorf("send without CAP_BPF: the error names %s, which the process has: %s", has, r.stderr)
		}
	}
	t.Logf("send without CAP_BPF: %s", strings.TrimSpace(r.stderr))
}
