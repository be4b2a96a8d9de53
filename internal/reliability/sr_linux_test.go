package reliability

import (
	"fmt"
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
)

// TestPrivilegedRelaySR: `xdproce send` (RDMA WRITEs) between two xdproce
// peers through the relay with 5 % loss and 2 % reorder each way over
// AF_XDP: with the default --reliability (sr) both sides agree on
// selective repeat, the file lands whole and send says "sr"; with
// --reliability gbn on the client it lands whole and send says "gbn".
// 16 MiB each. With -long it measures the goodput curve: 256 MiB at 0,
// 0.1, 1 and 5 % loss (+2 % reorder where lossy), selective repeat and
// go-back-N, each point logged as a share of its loss-free run.
func TestPrivilegedRelaySR(t *testing.T) {
	netlab.Privileged(t)
	size := int64(16 << 20)
	losses := []float64{0.05}
	if *long {
		size = 256 << 20
		losses = []float64{0, 0.001, 0.01, 0.05}
	}
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	src, want := randomFile(t, tmp, size)
	rate := map[string]map[float64]float64{"sr": {}, "gbn": {}}
	for _, rel := range []string{"sr", "gbn"} {
		for _, loss := range losses {
			rc := netlab.RelayConfig{Seed: 7, Loss: loss}
			if loss > 0 {
				rc.Reorder = 0.02
			}
			t.Run(fmt.Sprintf("%s-loss%.1f", rel, 100*loss), func(t *testing.T) {
				topo := netlab.Relayed(t, netlab.LinkConfig{}, rc)
				res := relaySend(t, bin, topo, src, size, want, "--reliability", rel)
				if res.Reliability != rel {
					t.Fatalf("send used loss recovery %q, want %q", res.Reliability, rel)
				}
				rate[rel][loss] = float64(size) / res.Seconds / 1e6
				t.Logf("%d MiB in %.3f s (%.1f MB/s); relay %+v", size>>20, res.Seconds, rate[rel][loss], topo.Relay.Stats())
			})
		}
	}
	for _, rel := range []string{"sr", "gbn"} {
		for _, loss := range losses {
			line := fmt.Sprintf("%s at %.1f %% loss: %.1f MB/s", rel, 100*loss, rate[rel][loss])
			if base := rate[rel][0]; base > 0 && loss > 0 {
				line += fmt.Sprintf(" = %.0f %% of its loss-free %.1f MB/s", 100*rate[rel][loss]/base, base)
			}
			t.Log(line)
		}
	}
	// The machine's load moves a whole run: sr against gbn at the same
	// loss, measured minutes apart, is the steadier comparison.
	for _, loss := range losses {
		if g := rate["gbn"][loss]; g > 0 {
			t.Logf("at %.1f %% loss sr runs at %.2f× gbn", 100*loss, rate["sr"][loss]/g)
		}
	}
}
