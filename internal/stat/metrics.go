package stat

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Port is the value of the port label: a device has one port, numbered 1
// as rxe's.
const Port = "1"

// Collector presents devices' snapshots as Prometheus metrics: each counter
// as rdma_NAME_total{device,port}, the queue pairs alive as
// rdma_qps{device,port}, and with per-QP series each queue pair's counters
// as rdma_qp_NAME_total{device,port,qpn}. A scrape takes one snapshot per
// device (roce.Device.Snapshot), which reads published counters only.
type Collector struct {
	perQP bool

	mu      sync.Mutex
	devices []named
	descs   map[string]*prometheus.Desc
}

type named struct {
	name string
	src  Source
}

// NewCollector returns a Collector without devices; perQP adds per-queue-pair
// series.
func NewCollector(perQP bool) *Collector {
	return &Collector{perQP: perQP, descs: map[string]*prometheus.Desc{}}
}

// Add adds a device, labelled device=name.
func (c *Collector) Add(name string, src Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.devices = append(c.devices, named{name, src})
}

// Describe sends nothing: the metric names depend on the snapshots, so the
// Collector is unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.devices {
		s := d.src.Snapshot(c.perQP)
		c.emit(ch, "rdma_qps", "Queue pairs alive.", prometheus.GaugeValue, float64(s.QPs), d.name, Port)
		for _, x := range s.Counters {
			c.counter(ch, "rdma_"+x.Name+"_total", x.Value, d.name, Port)
		}
		for _, x := range s.XDP {
			c.counter(ch, "rdma_"+x.Name+"_total", x.Value, d.name, Port)
		}
		for _, q := range s.PerQP {
			qpn := "0x" + strconv.FormatUint(uint64(q.QPN), 16)
			for _, x := range q.Counters {
				c.counter(ch, "rdma_qp_"+x.Name+"_total", x.Value, d.name, Port, qpn)
			}
		}
	}
}

func (c *Collector) counter(ch chan<- prometheus.Metric, name string, v uint64, labels ...string) {
	c.emit(ch, name, "xdproce counter (docs/counters.md).", prometheus.CounterValue, float64(v), labels...)
}

func (c *Collector) emit(ch chan<- prometheus.Metric, name, help string, t prometheus.ValueType, v float64, labels ...string) {
	d := c.descs[name]
	if d == nil {
		names := []string{"device", "port", "qpn"}[:len(labels)]
		d = prometheus.NewDesc(name, help, names, nil)
		c.descs[name] = d
	}
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// Metrics is an HTTP server of the Prometheus text format at /metrics.
type Metrics struct {
	ln  net.Listener
	srv *http.Server
	err chan error
}

// ServeMetrics listens on addr (host:port; ":0" picks a port) and serves
// the collector's metrics, with the Go runtime's and the process's, at
// /metrics until Close.
func ServeMetrics(addr string, c *Collector) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &Metrics{ln: ln, err: make(chan error, 1),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() { m.err <- m.srv.Serve(ln) }()
	return m, nil
}

// Addr is the address the server listens on.
func (m *Metrics) Addr() net.Addr { return m.ln.Addr() }

// Close stops the server.
func (m *Metrics) Close() error {
	err := m.srv.Close()
	if serr := <-m.err; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
