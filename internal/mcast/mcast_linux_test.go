package mcast_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/mcast"
	"github.com/xdproce/xdproce/internal/netlab"
)

var long = flag.Bool("long", false, "run the long variants (100 MiB to three members)")

func buildCLI(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "xdproce")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/xdproce/xdproce/cmd/xdproce")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// txBytes reads an interface's transmitted bytes inside its namespace.
func txBytes(t *testing.T, m *netlab.Iface) int64 {
	t.Helper()
	out, err := m.NS.Command(context.Background(), "cat", "/sys/class/net/"+m.Name+"/statistics/tx_bytes").Output()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// recvProc is a running `mcast recv`.
type recvProc struct {
	cmd      *exec.Cmd
	dir      string
	out, err bytes.Buffer
}

func startRecv(t *testing.T, ctx context.Context, bin string, m *netlab.Iface, group string, extra ...string) *recvProc {
	t.Helper()
	return startRecvArgs(t, ctx, bin, m.NS, append([]string{"--group", group, "--dev", m.Name, "--link", "xsk", "--insecure"}, extra...)...)
}

// startRecvArgs starts `mcast recv --dir DIR --json ARGS` in ns.
func startRecvArgs(t *testing.T, ctx context.Context, bin string, ns *netlab.NS, args ...string) *recvProc {
	t.Helper()
	r := &recvProc{dir: t.TempDir()}
	r.cmd = ns.Command(ctx, bin, append([]string{"mcast", "recv", "--dir", r.dir, "--json"}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.err
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
	return r
}

// runSend runs `mcast send` of file from m and decodes its JSON result.
func runSend(t *testing.T, ctx context.Context, bin string, m *netlab.Iface, file string, extra ...string) (res *mcast.Result, stderr string, err error) {
	t.Helper()
	return runSendArgs(t, ctx, bin, m.NS, append([]string{"--group", "239.1.2.3", "--dev", m.Name, "--link", "xsk", "--insecure", "--wait", "10s"}, append(extra, file)...)...)
}

// runSendArgs runs `mcast send --json ARGS` in ns.
func runSendArgs(t *testing.T, ctx context.Context, bin string, ns *netlab.NS, args ...string) (res *mcast.Result, stderr string, err error) {
	t.Helper()
	cmd := ns.Command(ctx, bin, append([]string{"mcast", "send", "--json"}, args...)...)
	var out, serr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &serr
	err = cmd.Run()
	res = &mcast.Result{}
	if jerr := json.Unmarshal(out.Bytes(), res); jerr != nil {
		t.Fatalf("send: %v, printed %q: %v\n%s", err, out.String(), jerr, serr.String())
	}
	return res, serr.String(), err
}

// newLab builds the star, the binary and a random file of size bytes; ctx
// ends after d or with the test.
func newLab(t *testing.T, cfg netlab.StarConfig, size int, d time.Duration) (*netlab.Star, string, string, []byte, context.Context) {
	t.Helper()
	s := netlab.StarT(t, cfg)
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	file, want := randomFile(t, tmp, size)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return s, bin, file, want, ctx
}

// checkFiles waits for the members and checks each wrote want.
func checkFiles(t *testing.T, members []*recvProc, want []byte) {
	t.Helper()
	for i, r := range members {
		if err := r.cmd.Wait(); err != nil {
			t.Errorf("member %d: %v\n%s", i+1, err, r.err.String())
		}
		if got, err := os.ReadFile(filepath.Join(r.dir, "payload.bin")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("member %d: file %d bytes, err %v (want %d bytes, byte-exact)", i+1, len(got), err, len(want))
		}
	}
}

func randomFile(t *testing.T, dir string, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	p := filepath.Join(dir, "payload.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// TestPrivilegedMcastSend: `mcast send` of 12 MiB (100 MiB with -long) to
// three members of 239.1.2.3 through a bridge over AF_XDP: every member
// writes it byte-exact under the sender's base name; the sender multicast
// ⌈len/segment⌉ data frames and its interface transmitted under 1.2× the
// file's bytes (so no member got its own copy); a fourth namespace running
// `mcast recv` on 239.1.2.4 saw the flooded frames, placed nothing (its
// --dir stays empty) and counted them dropped.
func TestPrivilegedMcastSend(t *testing.T) {
	netlab.Privileged(t)
	size := 12 << 20
	if *long {
		size = 100 << 20
	}
	s, bin, file, want, ctx := newLab(t, netlab.StarConfig{Members: 5}, size, 5*time.Minute)
	var members []*recvProc
	for _, m := range s.Members[1:4] {
		members = append(members, startRecv(t, ctx, bin, m, "239.1.2.3", "--count", "1"))
	}
	other := startRecv(t, ctx, bin, s.Members[4], "239.1.2.4")
	time.Sleep(500 * time.Millisecond)
	tx0 := txBytes(t, s.Members[0])
	res, serr, err := runSend(t, ctx, bin, s.Members[0], file)
	tx := txBytes(t, s.Members[0]) - tx0
	if err != nil {
		t.Fatalf("send: %v\n%s", err, serr)
	}
	t.Logf("%d MiB to %d members in %v (%.1f MB/s); sender transmitted %d bytes (%.3f× the file)",
		size>>20, len(res.Members), res.Elapsed, float64(size)/res.Elapsed.Seconds()/1e6, tx, float64(tx)/float64(size))
	if len(res.Members) != 3 {
		t.Fatalf("%d members, want 3: %+v", len(res.Members), res.Members)
	}
	if want := (size + res.Segment - 1) / res.Segment; res.Frames != want {
		t.Errorf("%d multicast data frames, want ⌈%d/%d⌉ = %d", res.Frames, size, res.Segment, want)
	}
	if float64(tx) >= 1.2*float64(size) {
		t.Errorf("the sender transmitted %d bytes for a %d-byte file (≥ 1.2×)", tx, size)
	}
	checkFiles(t, members, want)
	for _, m := range res.Members {
		if !m.OK || m.Acked != res.Ops {
			t.Errorf("member %v: %+v (want ok, %d operations acknowledged)", m.Addr, m, res.Ops)
		}
	}
	other.cmd.Process.Signal(syscall.SIGINT)
	if err := other.cmd.Wait(); err != nil {
		t.Errorf("other group's member: %v\n%s", err, other.err.String())
	}
	if ents, _ := os.ReadDir(other.dir); len(ents) != 0 {
		t.Errorf("the other group's member wrote %d files", len(ents))
	}
	if other.out.Len() != 0 {
		t.Errorf("the other group's member reported %q", other.out.String())
	}
	dropped := regexp.MustCompile(`dropped (\d+) frames .* (\d+) RoCE frames`).FindStringSubmatch(other.err.String())
	if dropped == nil {
		t.Fatalf("the other group's member printed no drop counts: %s", other.err.String())
	}
	a, _ := strconv.Atoi(dropped[1])
	b, _ := strconv.Atoi(dropped[2])
	if a+b < res.Frames {
		t.Errorf("the other group's member dropped %d + %d frames, want ≥ %d (the flooded data frames)", a, b, res.Frames)
	}
}

// roceOnly selects IPv4 UDP frames to port 4791: the data path, not the
// control datagrams.
func roceOnly(f []byte) bool {
	return len(f) > 37 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17 &&
		binary.BigEndian.Uint16(f[14+int(f[14]&15)*4+2:]) == 4791
}

// TestPrivilegedMcastBlackhole: a member whose leg drops every RoCE frame
// (its control datagrams pass, so it takes the offer) is the only target of
// unicast retries and is given up after --tries; the others write the file.
func TestPrivilegedMcastBlackhole(t *testing.T) {
	netlab.Privileged(t)
	const size = 2 << 20
	s, bin, file, want, ctx := newLab(t, netlab.StarConfig{Members: 4, Relays: map[int]netlab.RelayConfig{
		3: {Seed: 1, Loss: 1, Filter: roceOnly},
	}}, size, 3*time.Minute)
	var members []*recvProc
	for _, m := range s.Members[1:] {
		members = append(members, startRecv(t, ctx, bin, m, "239.1.2.3", "--count", "1"))
	}
	time.Sleep(500 * time.Millisecond)
	res, serr, err := runSend(t, ctx, bin, s.Members[0], file, "--tries", "3")
	if err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("send: %v, want exit status 1 (a member failed)\n%s", err, serr)
	}
	if len(res.Members) != 3 {
		t.Fatalf("%d members, want 3: %+v", len(res.Members), res.Members)
	}
	dead := s.Members[3].IPv4
	for _, m := range res.Members {
		if m.Addr == dead {
			if m.OK || m.Retries == 0 || m.Acked != 0 {
				t.Errorf("blackholed member %v: %+v (want failed, retried, nothing acknowledged)", m.Addr, m)
			}
			continue
		}
		if !m.OK || m.Retries != 0 || m.Acked != res.Ops {
			t.Errorf("member %v: %+v (want ok, no retries)", m.Addr, m)
		}
	}
	checkFiles(t, members[:2], want)
	r := members[2]
	if err := r.cmd.Wait(); err != nil {
		t.Errorf("blackholed member: %v\n%s", err, r.err.String())
	}
	if ents, _ := os.ReadDir(r.dir); len(ents) != 0 || !strings.Contains(r.out.String(), "gave this member up") {
		t.Errorf("blackholed member wrote %d files, reported %q", len(ents), r.out.String())
	}
}

// TestPrivilegedMcastUDP: the same over link/udp (the link's socket joins
// the group; a later --link overrides the helpers' xsk): two members
// byte-exact, ⌈len/segment⌉ frames, no retries.
func TestPrivilegedMcastUDP(t *testing.T) {
	netlab.Privileged(t)
	const size = 3<<20 + 5
	s, bin, file, want, ctx := newLab(t, netlab.StarConfig{Members: 3}, size, 2*time.Minute)
	var members []*recvProc
	for _, m := range s.Members[1:] {
		members = append(members, startRecv(t, ctx, bin, m, "239.1.2.3", "--count", "1", "--link", "udp"))
	}
	time.Sleep(500 * time.Millisecond)
	tx0 := txBytes(t, s.Members[0])
	res, serr, err := runSend(t, ctx, bin, s.Members[0], file, "--link", "udp")
	tx := txBytes(t, s.Members[0]) - tx0
	if err != nil {
		t.Fatalf("send: %v\n%s", err, serr)
	}
	if len(res.Members) != 2 || float64(tx) >= 1.2*float64(size) {
		t.Fatalf("%d members, %d bytes transmitted for %d: %+v", len(res.Members), tx, size, res.Members)
	}
	checkFiles(t, members, want)
	for _, m := range res.Members {
		if !m.OK || m.Acked != res.Ops {
			t.Errorf("member %v: %+v", m.Addr, m)
		}
	}
}

// TestPrivilegedMcastScaling (with -long) measures `mcast send` of 64 MiB
// to 1, 2 and 4 members in one star (AF_XDP, 1500-byte MTU) and logs the
// rates: one packet stream whatever the count, so the rate should hold.
func TestPrivilegedMcastScaling(t *testing.T) {
	netlab.Privileged(t)
	if !*long {
		t.Skip("a measurement: run with -long")
	}
	const size = 64 << 20
	s := netlab.StarT(t, netlab.StarConfig{Members: 5})
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	file, _ := randomFile(t, tmp, size)
	for _, n := range []int{1, 2, 4} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var members []*recvProc
		for _, m := range s.Members[1 : 1+n] {
			members = append(members, startRecv(t, ctx, bin, m, "239.1.2.3", "--count", "1"))
		}
		time.Sleep(500 * time.Millisecond)
		res, serr, err := runSend(t, ctx, bin, s.Members[0], file, "--wait", "3s")
		if err != nil || len(res.Members) != n {
			t.Fatalf("%d members: %v, %+v\n%s", n, err, res.Members, serr)
		}
		retries := 0
		for _, m := range res.Members {
			retries += m.Retries
		}
		for _, r := range members {
			r.cmd.Wait()
		}
		cancel()
		t.Logf("%d members: 64 MiB in %v, %.1f MB/s, %d unicast retries", n, res.Elapsed, float64(size)/res.Elapsed.Seconds()/1e6, retries)
	}
}

// TestPrivilegedMcastPSK: with --psk-file (and no --dev: the interface of
// the route to the group), the members holding the sender's key get the
// file; a member with another key is not heard (its announcements fail
// authentication) and ends with nothing.
func TestPrivilegedMcastPSK(t *testing.T) {
	netlab.Privileged(t)
	s := netlab.StarT(t, netlab.StarConfig{Members: 4})
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	file, want := randomFile(t, tmp, 1<<20+3)
	key, other := filepath.Join(tmp, "key"), filepath.Join(tmp, "other")
	for p, k := range map[string]string{key: "0123456789abcdef0123456789abcdef", other: "fedcba9876543210fedcba9876543210"} {
		if err := os.WriteFile(p, []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var good []*recvProc
	for _, m := range s.Members[1:3] {
		good = append(good, startRecvArgs(t, ctx, bin, m.NS, "--group", "239.1.2.3", "--psk-file", key, "--count", "1"))
	}
	bad := startRecvArgs(t, ctx, bin, s.Members[3].NS, "--group", "239.1.2.3", "--psk-file", other)
	time.Sleep(500 * time.Millisecond)
	res, serr, err := runSendArgs(t, ctx, bin, s.Members[0].NS, "--group", "239.1.2.3", "--psk-file", key, "--wait", "5s", file)
	if err != nil {
		t.Fatalf("send: %v\n%s", err, serr)
	}
	if len(res.Members) != 2 {
		t.Fatalf("%d members, want the 2 with the key: %+v", len(res.Members), res.Members)
	}
	for _, m := range res.Members {
		if m.Addr == s.Members[3].IPv4 || !m.OK {
			t.Errorf("member %+v", m)
		}
	}
	checkFiles(t, good, want)
	bad.cmd.Process.Signal(syscall.SIGINT)
	bad.cmd.Wait()
	if ents, _ := os.ReadDir(bad.dir); len(ents) != 0 || bad.out.Len() != 0 {
		t.Errorf("the member with another key wrote %d files, reported %q", len(ents), bad.out.String())
	}
}

// TestPrivilegedMcastDest: the same to an IPv6 group (ff15::1:2:3, MAC
// 33:33:00:01:02:03; the GIDs are the members' global addresses) and to the
// subnet broadcast 198.51.100.255 (ff:ff:ff:ff:ff:ff; nothing to join, the
// steering program takes it) over AF_XDP: two members byte-exact,
// ⌈len/segment⌉ frames, no retries, the sender's interface under 1.2× the
// file.
func TestPrivilegedMcastDest(t *testing.T) {
	netlab.Privileged(t)
	for _, dest := range []string{"ff15::1:2:3", "198.51.100.255"} {
		t.Run(dest, func(t *testing.T) {
			const size = 2<<20 + 7
			s, bin, file, want, ctx := newLab(t, netlab.StarConfig{Members: 3}, size, 2*time.Minute)
			var members []*recvProc
			for _, m := range s.Members[1:] {
				members = append(members, startRecv(t, ctx, bin, m, dest, "--count", "1"))
			}
			time.Sleep(500 * time.Millisecond)
			tx0 := txBytes(t, s.Members[0])
			res, serr, err := runSendArgs(t, ctx, bin, s.Members[0].NS, "--group", dest, "--dev", s.Members[0].Name,
				"--link", "xsk", "--insecure", "--wait", "5s", file)
			tx := txBytes(t, s.Members[0]) - tx0
			if err != nil {
				t.Fatalf("send: %v\n%s", err, serr)
			}
			if len(res.Members) != 2 || float64(tx) >= 1.2*float64(size) || res.Frames != (size+res.Segment-1)/res.Segment {
				t.Fatalf("%d members, %d frames, %d bytes transmitted for %d: %+v", len(res.Members), res.Frames, tx, size, res.Members)
			}
			checkFiles(t, members, want)
			for _, m := range res.Members {
				if !m.OK || m.Retries != 0 || m.Acked != res.Ops || m.GID.Is6() != strings.Contains(dest, ":") {
					t.Errorf("member %+v", m)
				}
			}
		})
	}
}
