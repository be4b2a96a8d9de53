package roce_test

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// threadsPinnedTo counts this process's threads whose affinity list
// (/proc/self/task/*/status, Cpus_allowed_list) is exactly list.
func threadsPinnedTo(t *testing.T, list string) int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) == list {
				n++
			}
		}
	}
	return n
}

// TestDeviceCPUs: a device opened with Options.CPUs runs its progress
// goroutine on a thread that may run only there (one thread of the process
// has exactly that affinity), carries an RDMA WRITE byte-exact, and leaves
// no restricted thread behind once closed.
func TestDeviceCPUs(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	if allowed.Count() < 2 {
		t.Skipf("needs two CPUs to tell a pinned thread from the others; this process may use %d", allowed.Count())
	}
	cpu := -1
	for c := range len(allowed) * 64 {
		if allowed.IsSet(c) {
			cpu = c // the highest allowed CPU
		}
	}
	list := strconv.Itoa(cpu)
	if n := threadsPinnedTo(t, list); n != 0 {
		t.Fatalf("%d threads pinned to CPU %d before the device exists", n, cpu)
	}
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{addrA}, CPUs: []int{cpu}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			a.Close()
		}
	})
	b, err := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{addrB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if n := threadsPinnedTo(t, list); n != 1 {
		t.Fatalf("%d threads pinned to CPU %d with the device open, want 1 (its progress goroutine's)", n, cpu)
	}

	x, y := connectRC(t, &devPair{a: a, b: b}, connCfg{})
	const n = 200 << 10
	fill(x.buf[:n], 3)
	if err := x.qp.PostSend(roce.SendWR{ID: 7, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(0, n)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Status != qp.WCSuccess || wc.ID != 7 {
		t.Fatalf("WRITE completion %+v (%v)", wc, wc.Status)
	}
	if !bytes.Equal(y.buf[:n], x.buf[:n]) {
		t.Fatal("WRITE data differs at the target")
	}

	a.Close()
	closed = true
	deadline := time.Now().Add(5 * time.Second)
	for threadsPinnedTo(t, list) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a thread pinned to CPU %d outlived the device", cpu)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeviceCPUsInvalid: CPUs the process may not run on are refused by
// NewDevice with an error naming the CPU and the ones allowed.
func TestDeviceCPUsInvalid(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	outside := 0
	for allowed.IsSet(outside) {
		outside++
	}
	la, _, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	for _, cpu := range []int{-1, outside, 1 << 20} {
		d, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{addrA}, CPUs: []int{cpu}})
		if err == nil {
			d.Close()
			t.Fatalf("CPUs [%d] accepted", cpu)
		}
		want := "roce: new device: options: cpu " + strconv.Itoa(cpu) + " is not one this process may run on ("
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("CPUs [%d]: %q, want it to start %q", cpu, err, want)
		}
	}
}
