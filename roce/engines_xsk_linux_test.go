package roce_test

import (
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedXSKEngines: two devices of two engines each over AF_XDP on
// a veth pair of two queues, native and generic XDP: UD, every RC operation
// and a mixed load on four queue pairs, byte-exact with completions in
// order per queue pair; each connection settles on the same engine at both
// ends (runEngineLoad). With native XDP, veth delivers what an AF_XDP
// socket sends on queue k to the peer's XDP program on queue k, so no frame
// changes engines; with generic XDP the program sees every frame on queue
// 0 (when all queue pairs were on engine 1, every frame was handed over),
// so both ends hand frames over. Then a device of one engine (which sends everything on
// its first queue) talks to one of two engines: handoffs again.
func TestPrivilegedXSKEngines(t *testing.T) {
	netlab.Privileged(t)
	for _, mode := range []string{"native", "generic"} {
		t.Run(mode, func(t *testing.T) {
			topo := netlab.Pair(t, netlab.LinkConfig{Queues: 2})
			o := roce.Options{Link: roce.LinkXSK, XDPMode: mode, Engines: 2}
			p := &devPair{a: openIn(t, topo.A, o), b: openIn(t, topo.B, o)}
			total := int64(16 << 20)
			if testing.Short() {
				total = 4 << 20
			}
			sa, sb := runEngineLoad(t, p, total, 4)
			switch {
			case mode == "native" && sa.Handoffs+sb.Handoffs != 0:
				t.Errorf("queue pairs paired by QPN on a 2-queue veth: %d + %d handoffs, want none", sa.Handoffs, sb.Handoffs)
			case mode == "generic" && (sa.Handoffs == 0 || sb.Handoffs == 0):
				t.Errorf("generic XDP: %d + %d handoffs, want frames for engine 1 handed over at both ends", sa.Handoffs, sb.Handoffs)
			}
		})
	}
	t.Run("one-to-two", func(t *testing.T) {
		topo := netlab.Pair(t, netlab.LinkConfig{Queues: 2})
		p := &devPair{
			a: openIn(t, topo.A, roce.Options{Link: roce.LinkXSK, Engines: 1}),
			b: openIn(t, topo.B, roce.Options{Link: roce.LinkXSK, Engines: 2}),
		}
		_, sb := runEngineLoad(t, p, 4<<20, 4)
		if sb.Handoffs == 0 {
			t.Errorf("a one-engine peer sending on queue 0 to queue pairs of both engines: no handoffs")
		}
	})
}
