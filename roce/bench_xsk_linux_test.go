package roce_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/xsk"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
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
			benchOps(b, p, qp.WRRDMAWrite, 64<<10, writeDepth(c.pmtu))
		})
	}
}

// writeDepth is the number of 64 KiB WRITEs the benchmarks keep outstanding
// at a path MTU: as many as the default send window (qp.DefaultSendWindow,
// 1024 PSNs) holds, so that the window, not the benchmark, bounds the frames
// in flight, as the raw run's 1024-frame window does: 16 at PMTU 1024, 64 at
// 4096. (perftest's ib_write_bw keeps 128 outstanding by default.)
func writeDepth(pmtu int) int { return qp.DefaultSendWindow / (64 << 10 / pmtu) }

// BenchmarkPrivilegedXSKWriteVsRaw checks the target of RDMA WRITE at 90 %
// of the raw AF_XDP frame ceiling, fairly: per path MTU it builds one veth
// lab and, back to back in it, runs
//
//   - raw: the frames a 64 KiB WRITE consists of (RC_RDMA_WRITE_MIDDLE,
//     Ethernet+IPv4+UDP+BTH+PMTU payload+ICRC: 1082 B at PMTU 1024, 4154 B at
//     4096), in the same direction, through link/xsk sockets opened as
//     roce.Open opens them (same UMEM, ring and chunk sizes, same steering
//     program). Each frame is copied from a template into a UMEM buffer (the
//     one copy a WRITE makes on the sending side); no ICRC, no protocol.
//     Reported: received frames/s, Gb/s of frame bytes, payload-Gb/s
//     (PMTU bytes per frame, what a WRITE of these frames would carry).
//
//   - write: 64 KiB RDMA WRITEs between two devices (writeDepth outstanding),
//     reporting Gb/s of payload and pct-of-raw = 100 × WRITE payload rate /
//     raw payload-Gb/s of the run before (equivalently, WRITE data frames/s
//     over raw frames/s).
//
// Both also report cpu-ns/frame: the process's CPU time (user + system, so
// the kernel's copy-mode transmit and the peer's XDP receive done in our
// system calls count) per data frame delivered; write reports
// pct-of-raw-cpu = 100 × raw cpu-ns/frame / write cpu-ns/frame. On a machine
// shared with other work the rates swing with the load from run to run while
// the CPU cost per frame stays put, so pct-of-raw-cpu is the steadier
// comparison; pct-of-raw is the target's own measure.
//
// Run it as
//
//	go test -run '^$' -bench PrivilegedXSKWriteVsRaw -benchtime 3s ./roce
func BenchmarkPrivilegedXSKWriteVsRaw(b *testing.B) {
	netlab.Privileged(b)
	for _, c := range []struct{ pmtu, mtu int }{{1024, 1500}, {4096, 9000}} {
		b.Run("pmtu="+itoa(c.pmtu), func(b *testing.B) {
			topo := netlab.Pair(b, netlab.LinkConfig{MTU: c.mtu})
			var rawPayload, rawCPU float64 // payload-Gb/s and cpu-ns/frame of the last raw run
			b.Run("raw", func(b *testing.B) {
				rawPayload, rawCPU = benchRawWriteFrames(b, topo, c.pmtu)
			})
			b.Run("write", func(b *testing.B) {
				if rawPayload == 0 {
					b.Skip("no raw figure to compare with")
				}
				p := openBenchPairOn(b, topo, roce.Options{Link: roce.LinkXSK})
				cpu0 := cpuTime(b)
				benchOps(b, p, qp.WRRDMAWrite, 64<<10, writeDepth(c.pmtu))
				cpu := cpuTime(b) - cpu0
				if el := b.Elapsed(); el > 0 {
					gbps := float64(b.N) * (64 << 10) * 8 / el.Seconds() / 1e9
					b.ReportMetric(100*gbps/rawPayload, "pct-of-raw")
					perFrame := float64(cpu.Nanoseconds()) / (float64(b.N) * float64(64<<10/c.pmtu))
					b.ReportMetric(perFrame, "cpu-ns/frame")
					b.ReportMetric(100*rawCPU/perFrame, "pct-of-raw-cpu")
				}
			})
		})
	}
}

// openBenchPairOn opens devices on both ends of an existing lab.
func openBenchPairOn(b *testing.B, topo *netlab.Topo, o roce.Options) *devPair {
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

// rawEnd is one side of the raw run: link/xsk sockets and the steering
// program, as roce.Open sets them up.
type rawEnd struct {
	dev  *xsk.Device
	sock *xsk.Socket
}

func openRawEnd(b *testing.B, e *netlab.Iface) *rawEnd {
	r := &rawEnd{}
	var prog *bpf.Program
	err := e.NS.Do(func() error {
		var err error
		if r.dev, err = xsk.Open(e.Name, nil); err != nil {
			return err
		}
		ips := []netip.Addr{e.IPv4, e.IPv6}
		prog, err = bpf.Attach(e.Name, ips, r.dev.FDs(), nil)
		return err
	})
	if r.dev != nil {
		b.Cleanup(func() { r.dev.Close() })
	}
	if prog != nil {
		b.Cleanup(func() { prog.Close() })
	}
	if err != nil {
		b.Fatal(err)
	}
	r.sock = r.dev.Sockets[0]
	return r
}

// cpuTime is the CPU time (user + system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchRawWriteFrames sends b.N RC_RDMA_WRITE_MIDDLE frames with pmtu bytes
// of payload from topo.A to topo.B over bare link/xsk sockets and returns
// the payload-Gb/s the received frames carry and the CPU time per received
// frame (ns).
func benchRawWriteFrames(b *testing.B, topo *netlab.Topo, pmtu int) (gbps, cpuPerFrame float64) {
	tx := openRawEnd(b, topo.A)
	rx := openRawEnd(b, topo.B)
	pkt := wire.Packet{
		DstMAC: [6]byte(topo.B.HWAddr), SrcMAC: [6]byte(topo.A.HWAddr),
		SrcIP: topo.A.IPv4, DstIP: topo.B.IPv4, TTL: 64, IPFlags: 2,
		SrcPort: wire.SourcePort(0x11, 0x12), DstPort: wire.UDPPort,
		BTH:     wire.BTH{Opcode: wire.RCWriteMiddle, PKey: 0xffff, DestQPN: 0x12},
		Payload: make([]byte, pmtu),
	}
	tmpl := make([]byte, pkt.FrameLen())
	n, err := pkt.Encode(tmpl)
	if err != nil {
		b.Fatal(err)
	}
	tmpl = tmpl[:n]
	var received atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		frames := make([][]byte, 64)
		for {
			n, err := rx.sock.Receive(frames)
			if err != nil {
				return
			}
			if n > 0 {
				received.Add(int64(n))
				continue
			}
			select {
			case <-stop:
				return
			default:
			}
			rx.sock.Wait(time.Millisecond)
		}
	}()
	bufs := make([][]byte, 64)
	b.SetBytes(int64(len(tmpl)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0 := cpuTime(b)
	const window = 1024 // half of the receiver's RX ring: copy-mode RX drops what overflows
	for sent := 0; sent < b.N; {
		for spin := 0; int64(sent)-received.Load() > window; spin++ {
			if spin > 1000 {
				sent = int(received.Load()) + window/2 // frames were lost
				break
			}
			time.Sleep(time.Microsecond)
		}
		k := tx.sock.Alloc(bufs[:min(len(bufs), b.N-sent)])
		for i := range k {
			bufs[i] = bufs[i][:copy(bufs[i], tmpl)]
		}
		if err := tx.sock.Send(bufs[:k]); err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	last, lastT := received.Load(), time.Now()
	for received.Load() < int64(b.N) && time.Since(lastT) < 20*time.Millisecond {
		time.Sleep(100 * time.Microsecond)
		if r := received.Load(); r != last {
			last, lastT = r, time.Now()
		}
	}
	el := time.Since(start)
	if received.Load() < int64(b.N) {
		el = lastT.Sub(start)
	}
	b.StopTimer()
	close(stop)
	rx.sock.Wake()
	<-done
	cpu := cpuTime(b) - cpu0
	r := float64(received.Load())
	sec := el.Seconds()
	gbps = r * float64(pmtu) * 8 / sec / 1e9
	cpuPerFrame = float64(cpu.Nanoseconds()) / max(r, 1)
	b.ReportMetric(r/sec, "frames/s")
	b.ReportMetric(r*float64(len(tmpl))*8/sec/1e9, "Gb/s")
	b.ReportMetric(gbps, "payload-Gb/s")
	b.ReportMetric(cpuPerFrame, "cpu-ns/frame")
	b.ReportMetric(1-r/float64(b.N), "lost")
	return gbps, cpuPerFrame
}

// BenchmarkPrivilegedXSKUDPWrite64K: the same RDMA WRITEs over link/udp
// (kernel UDP sockets) on the same veth lab.
func BenchmarkPrivilegedXSKUDPWrite64K(b *testing.B) {
	netlab.Privileged(b)
	for _, c := range []struct{ pmtu, mtu int }{{1024, 1500}, {4096, 9000}} {
		b.Run("pmtu="+itoa(c.pmtu), func(b *testing.B) {
			p := openBenchPair(b, c.mtu, roce.Options{Link: roce.LinkUDP})
			benchOps(b, p, qp.WRRDMAWrite, 64<<10, writeDepth(c.pmtu))
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
