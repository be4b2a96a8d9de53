package stat

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/roce"
)

// qpSource reports one counter and, per QP, one more.
type qpSource struct{ n uint64 }

func (s *qpSource) Snapshot(perQP bool) *roce.Snapshot {
	s.n++
	snap := &roce.Snapshot{QPs: 1, Counters: roce.Counters{{Name: "sent_pkts", Value: s.n}},
		XDP: roce.Counters{{Name: "xdp_redirected", Value: 7}}}
	if perQP {
		snap.PerQP = []roce.QPSnapshot{{QPN: 0x11, Counters: roce.Counters{{Name: "retransmits", Value: 3}}}}
	}
	return snap
}

func TestMetrics(t *testing.T) {
	for _, perQP := range []bool{false, true} {
		c := NewCollector(perQP)
		c.Add("eth9", &qpSource{})
		m, err := ServeMetrics("127.0.0.1:0", c)
		if err != nil {
			t.Fatal(err)
		}
		var bodies []string
		for range 2 {
			resp, err := http.Get("http://" + m.Addr().String() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies = append(bodies, string(b))
		}
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		// Each scrape takes a fresh snapshot.
		for i, body := range bodies {
			if want := fmt.Sprintf("rdma_sent_pkts_total{device=\"eth9\",port=\"1\"} %d\n", i+1); !strings.Contains(body, want) {
				t.Errorf("perQP %v: scrape %d lacks %q:\n%s", perQP, i, want, body)
			}
		}
		for _, want := range []string{"# TYPE rdma_sent_pkts_total counter\n", `rdma_qps{device="eth9",port="1"} 1`,
			`rdma_xdp_redirected_total{device="eth9",port="1"} 7`, "go_goroutines "} {
			if !strings.Contains(bodies[0], want) {
				t.Errorf("perQP %v: scrape lacks %q", perQP, want)
			}
		}
		qpLine := `rdma_qp_retransmits_total{device="eth9",port="1",qpn="0x11"} 3`
		if strings.Contains(bodies[0], qpLine) != perQP {
			t.Errorf("perQP %v: per-QP series present: %v", perQP, !perQP)
		}
	}
}
