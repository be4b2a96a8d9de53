package roce_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// The BenchmarkPrivilegedXSK* family (with link/xsk's raw frame ceiling,
// BenchmarkPrivilegedXSKRaw*): run them together so the ratios hold:
//
//	go test -run '^$' -bench PrivilegedXSK ./link/xsk ./roce
//
// Each runs between two namespaces joined by veth.

// openBenchPair opens devices of the given link kind on both ends of a veth
// pair with the given MTU.
func openBenchPair(b *testing.B, mtu int, o roce.Options) *devPair {
	topo := netlab.Pair(b, netlab.LinkConfig{MTU: mtu})
	var ds [2]*roce.Device
	for i, e := range []*netlab.Iface{topo.A, topo.B} {
		if err := e.NS.Do(func() error {
			var err error
			ds[i], err = roce.Open(e.Name, &o)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		d := ds[i]
		b.Cleanup(func() { d.Close() })
	}
	return &devPair{a: ds[0], b: ds[1]}
}

// BenchmarkPrivilegedXSKWrite64K: RDMA WRITE bandwidth of 64 KiB messages
// over AF_XDP at PMTU 1024 (MTU 1500) and 4096 (MTU 9000).
func BenchmarkPrivilegedXSKWrite64K(b *testing.B) {
	netlab.Privileged(b)
	for _, c := range []struct{ pmtu, mtu int }{{1024, 1500}, {4096, 9000}} {
		b.Run("pmtu="+itoa(c.pmtu), func(b *testing.B) {
			p := openBenchPair(b, c.mtu, roce.Options{Link: roce.LinkXSK})
			benchOps(b, p, qp.WRRDMAWrite, 64<<10, 16)
		})
	}
}

// BenchmarkPrivilegedXSKUDPWrite64K: the same RDMA WRITEs over link/udp
// (kernel UDP sockets) on the same veth lab.
func BenchmarkPrivilegedXSKUDPWrite64K(b *testing.B) {
	netlab.Privileged(b)
	for _, c := range []struct{ pmtu, mtu int }{{1024, 1500}, {4096, 9000}} {
		b.Run("pmtu="+itoa(c.pmtu), func(b *testing.B) {
			p := openBenchPair(b, c.mtu, roce.Options{Link: roce.LinkUDP})
			benchOps(b, p, qp.WRRDMAWrite, 64<<10, 16)
		})
	}
}

// BenchmarkPrivilegedXSKSendLatency: round trip of an 8-byte SEND answered
// by an 8-byte SEND, over AF_XDP (and link/udp for comparison), reporting
// the median and 99th percentile in microseconds.
func BenchmarkPrivilegedXSKSendLatency(b *testing.B) {
	netlab.Privileged(b)
	for _, c := range []struct {
		kind roce.LinkKind
		busy time.Duration
	}{{roce.LinkXSK, 0}, {roce.LinkXSK, 200 * time.Microsecond}, {roce.LinkUDP, 0}} {
		name := "link=" + c.kind.String()
		if c.busy > 0 {
			name += "/busypoll=" + itoa(int(c.busy.Microseconds())) + "us"
		}
		b.Run(name, func(b *testing.B) {
			p := openBenchPair(b, 1500, roce.Options{Link: c.kind, BusyPoll: c.busy})
			benchPingPong(b, p)
		})
	}
}

func benchPingPong(b *testing.B, p *devPair) {
	x, y := connectRC(b, p, connCfg{bufSize: 1 << 16, maxWR: 64, cqDepth: 256})
	const depth = 16
	xr := []roce.SGE{x.sge(4096, 64)}
	yr := []roce.SGE{y.sge(4096, 64)}
	for i := 0; i < depth; i++ {
		if err := x.qp.PostRecv(roce.RecvWR{ID: 1, SGL: xr}); err != nil {
			b.Fatal(err)
		}
		if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: yr}); err != nil {
			b.Fatal(err)
		}
	}
	xs := roce.SendWR{Opcode: qp.WRSend, Flags: qp.Signaled | qp.Inline, SGL: []roce.SGE{x.sge(0, 8)}}
	ys := roce.SendWR{Opcode: qp.WRSend, Flags: qp.Signaled | qp.Inline, SGL: []roce.SGE{y.sge(0, 8)}}
	// The responder: answer every SEND.
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var wcs [8]roce.WC
		for {
			n, err := y.rcq.Wait(ctx, wcs[:])
			if err != nil {
				if ctx.Err() != nil {
					done <- nil
				} else {
					done <- err
				}
				return
			}
			for _, wc := range wcs[:n] {
				if wc.Status != qp.WCSuccess {
					done <- fmt.Errorf("responder completion %+v (%v)", wc, wc.Status)
					return
				}
				if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: yr}); err != nil {
					done <- err
					return
				}
				if err := y.qp.PostSend(ys); err != nil {
					done <- err
					return
				}
			}
			y.scq.Poll(wcs[:]) // send completions
		}
	}()
	lat := make([]time.Duration, b.N)
	var wcs [8]roce.WC
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := x.qp.PostSend(xs); err != nil {
			b.Fatal(err)
		}
		if n, err := x.rcq.Wait(ctx, wcs[:1]); err != nil || n != 1 || wcs[0].Status != qp.WCSuccess {
			b.Fatalf("reply: %d %+v %v", n, wcs[0], err)
		}
		lat[i] = time.Since(start)
		if err := x.qp.PostRecv(roce.RecvWR{ID: 1, SGL: xr}); err != nil {
			b.Fatal(err)
		}
		x.scq.Poll(wcs[:])
	}
	b.StopTimer()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "us-p50")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "us-p99")
}
