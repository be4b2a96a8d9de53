package cli

import (
	"flag"
	"fmt"

	"github.com/xdproce/xdproce/internal/stat"
)

// metricsFlags are --metrics and --metrics-per-qp of the long-running
// commands.
type metricsFlags struct {
	addr  string
	perQP bool
}

func (m *metricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics", "", "serve the device's counters in the Prometheus text format at http://`ADDR`/metrics (e.g. :9101 or 127.0.0.1:9101)")
	fs.BoolVar(&m.perQP, "metrics-per-qp", false, "add each queue pair's counters to --metrics (rdma_qp_*_total{qpn})")
}

// start serves dev's counters when --metrics was given and returns what
// stops it.
func (m *metricsFlags) start(env *Env, dev *device) (stop func(), err error) {
	if m.addr == "" {
		if m.perQP {
			env.Log.Warn("--metrics-per-qp does nothing without --metrics")
		}
		return func() {}, nil
	}
	c := stat.NewCollector(m.perQP)
	c.Add(dev.Name(), dev.Device)
	srv, err := stat.ServeMetrics(m.addr, c)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", m.addr, err)
	}
	fmt.Fprintf(env.Stderr, "metrics at http://%s/metrics\n", srv.Addr())
	return func() {
		if err := srv.Close(); err != nil {
			env.Log.Warn("metrics", "err", err)
		}
	}, nil
}
