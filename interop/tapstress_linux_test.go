package interop

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// envStress asks for TestPrivilegedInteropTapStress's run count.
const envStress = "XDPROCE_INTEROP_STRESS"

// TestPrivilegedInteropTapStress (only with XDPROCE_INTEROP_STRESS=N): N short AF_XDP runs
// against one guest, counting wedges of its tap (README). The guest runs one persistent
// rping server (-P); each run is an `xdproce rping` client over AF_XDP (its XDP program
// attached to the tap, a CM connection, 20 pings of 65000 B: SEND, READ, WRITE, then the
// disconnect and the program detached), then a TCP probe of the path. A dead path is a
// wedge: its virtio-net TX queue state is logged and the queue restarted (QMP stop/cont).
// It fails on any wedge or failed run. At the default size a run takes about 0.2 s.
func TestPrivilegedInteropTapStress(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(envStress))
	if n <= 0 {
		t.Skipf("set %s=N for N runs", envStress)
	}
	suiteEnabled(t)
	bin := xdproceBin(t)
	g := needGuest(t)
	const flags = "-C 20 -S 65000"
	server := func() {
		j := g.start(t, fmt.Sprintf("exec rping -s -P -a %s %s > /dev/null", g.guestIP, flags))
		g.cmListening(t, j, rpingPort, 60*time.Second)
	}
	server()
	var failed, wedges, unwedged int
	t0 := time.Now()
	for i := 1; i <= n; i++ {
		x := g.hostStart(t, bin, "rping", "--dev", g.tap, "--link", "xsk", "-c", "-a", g.guestIP, "-C", "20", "-S", "65000")
		if out, err := x.wait(60 * time.Second); err != nil {
			failed++
			t.Logf("run %d: %v: %s", i, err, lastLines(out, 2))
		}
		if g.pathOK() {
			continue
		}
		time.Sleep(2 * time.Second)
		if g.pathOK() {
			continue
		}
		wedges++
		t.Logf("run %d: no IP path to the guest (tap wedged)", i)
		if g.unwedge(t.Logf) {
			unwedged++
			continue
		}
		t.Logf("run %d: QMP stop/cont did not bring the path back; rebooting the guest", i)
		g = needGuest(t)
		server()
	}
	t.Logf("%d AF_XDP runs in %v: %d failed, %d wedges (%d undone by stop/cont)", n, time.Since(t0).Round(time.Second), failed, wedges, unwedged)
	if failed > 0 || wedges > 0 {
		t.Errorf("%d of %d runs failed, %d wedges", failed, n, wedges)
	}
}
