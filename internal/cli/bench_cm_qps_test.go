package cli

import (
	"bytes"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
)

// TestBenchCMQPs: bench -R -q 3 between two xdproce ends, as perftest's rdma_cm mode runs -q N:
// one control connection and then three CM connections to the same port (four REQs to
// 18515), every test queue pair's keys in the key messages (the client's name the QPNs of its
// REQs, the server's those of its REPs), and each queue pair carrying its 30 operations (the
// WRITEs, READs or SENDs counted per destination QPN on the wire); both ends report 3 queue
// pairs.
func TestBenchCMQPs(t *testing.T) {
	const qps, iters = 3, 30
	for name, first := range map[string]string{"write": "RC_RDMA_WRITE_FIRST", "read": "RC_RDMA_READ_REQUEST", "send": "RC_SEND_FIRST", "atomic": ""} {
		t.Run(name, func(t *testing.T) {
			size := 4096
			if name == "atomic" {
				size = 8
			}
			var capBuf syncBuffer
			s, c := benchCMDevs(t, name, size, iters, &capBuf, false)
			s.qps, c.qps = qps, qps
			srv, cli, serr, cerr := runBenchCM(t, s, c, 10*time.Second)
			if serr != nil || cerr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			for who, r := range map[string][]benchResult{"server": srv, "client": cli} {
				if len(r) != 1 || r[0].QPs != qps || r[0].Iters != iters || r[0].BW <= 0 {
					t.Errorf("%s: %+v", who, r)
				}
			}
			c.dev.Close()
			ev := cmEvents(t, []byte(capBuf.String()), netip.MustParseAddr("198.51.100.2"))
			var reqs, reps []uint32
			keys := map[bool]map[uint32]bool{true: {}, false: {}}
			ops := map[uint32]int{}
			for _, e := range ev {
				switch {
				case e.kind == "REQ":
					if e.sid != 0x0000000001064853 {
						t.Errorf("REQ to service ID %#x, want 0x1064853 (port 18515)", e.sid)
					}
					reqs = append(reqs, e.qpn)
				case e.kind == "REP":
					reps = append(reps, e.qpn)
				case e.kind == "RC_SEND_ONLY" && len(e.payload) == cm.PerftestCMKeyLen && bytes.Count(e.payload, []byte{0}) != len(e.payload):
					d, err := cm.UnmarshalPerftestDestCM(e.payload)
					if err != nil {
						t.Fatal(err)
					}
					keys[e.fromClient][d.QPN] = true
				case e.kind == first && e.fromClient:
					ops[e.qpn]++
				}
			}
			if len(reqs) != 1+qps || len(reps) != 1+qps {
				t.Fatalf("%d REQs and %d REPs, want %d each (a control connection and %d test ones)", len(reqs), len(reps), 1+qps, qps)
			}
			for who, want := range map[bool][]uint32{true: reqs[1:], false: reps[1:]} {
				if got := slices.Sorted(maps.Keys(keys[who])); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
					t.Errorf("client %v: key messages name QPNs %#x, the test connections' are %#x", who, got, want)
				}
			}
			if first == "" {
				return
			}
			for _, q := range reps[1:] {
				if ops[q] != iters {
					t.Errorf("%s to server QPN %#x: %d, want %d (all: %v)", first, q, ops[q], iters, ops)
				}
			}
		})
	}
}
