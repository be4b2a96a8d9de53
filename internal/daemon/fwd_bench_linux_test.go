package daemon

import (
	"context"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce"
)

// benchAccess is the access of the benchmarks' regions.
const benchAccess = roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead

// writePair connects a queue pair on from to one on to over size-byte
// buffers (from AllocMR when alloc; the responder's with raccess) and
// returns the requester's WRITE of its whole buffer and both sides.
func writePair(tb testing.TB, from, to *roce.Device, size int, alloc bool, raccess roce.Access) (roce.SendWR, *scriptSide, *scriptSide) {
	sa, sb := newScriptSideAccess(tb, from, size, alloc, benchAccess), newScriptSideAccess(tb, to, size, alloc, raccess)
	if err := sa.qp.Connect(1, endpoint(tb, to, sb.qp, 2), nil); err != nil {
		tb.Fatal(err)
	}
	if err := sb.qp.Connect(2, endpoint(tb, from, sa.qp, 1), nil); err != nil {
		tb.Fatal(err)
	}
	return roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL:        []roce.SGE{{Addr: sa.mr.Addr(), Length: uint32(size), LKey: sa.mr.LKey()}},
		RemoteAddr: sb.mr.Addr(), RKey: sb.mr.RKey()}, sa, sb
}

// openXSK opens a device owning ifname in ns by AF_XDP, closed at the
// test's end.
func openXSK(tb testing.TB, ns *netlab.NS, ifname string) *roce.Device {
	var d *roce.Device
	if err := ns.Do(func() error {
		var err error
		d, err = roce.Open(ifname, &roce.Options{Link: roce.LinkXSK})
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

// benchWrite posts n copies of wr on s, keeping up to len(wcs) in flight,
// and fails on any completion but success.
func benchWrite(ctx context.Context, tb testing.TB, s *scriptSide, wr roce.SendWR, n int, wcs []roce.WC) {
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < len(wcs) {
			if err := s.qp.PostSend(wr); err != nil {
				tb.Fatal(err)
			}
			posted++
		}
		k, err := s.cq.Wait(ctx, wcs)
		if err != nil {
			tb.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != roce.WCSuccess {
				tb.Fatalf("completion %+v", wc)
			}
		}
		done += k
	}
}

// BenchmarkPrivilegedDaemonWrite64K: issue 17's frame-switching and
// forwarding figures, from one run. 64 KiB RDMA WRITEs (PMTU 4096: the
// veths' MTU is 9000), up to 64 in flight, in rounds of 128 alternating
// three paths: between two clients of a daemon on ordinary memory (no
// placement: frames switched port to port), from a client of that daemon
// to a device owning the other end of the daemon's veth (forwarded to the
// wire by AF_XDP), and between two devices each owning one end of a
// second veth pair by AF_XDP (the process that owns its interface). It
// reports the rates, each side's CPU time per WRITE (the whole process's),
// and the ratios switched/xsk (target >= 3) and forwarded/xsk (target >=
// 0.9); nothing is asserted.
// Run it alone: flock /tmp/xdproce-bench.lock go test -run '^$' -bench
// PrivilegedDaemonWrite64K ./internal/daemon
func BenchmarkPrivilegedDaemonWrite64K(b *testing.B) {
	netlab.Privileged(b)
	const size, round, depth = 64 << 10, 128, 64
	topo, x, y, _ := daemonClientsIn(b)
	w := openXSK(b, topo.B.NS, topo.B.Name)
	own := netlab.Pair(b, netlab.LinkConfig{MTU: 9000})
	o, p := openXSK(b, own.A.NS, own.A.Name), openXSK(b, own.B.NS, own.B.Name)
	sides := []struct {
		name string
		from *roce.Device
		to   *roce.Device
		wr   roce.SendWR
		s    *scriptSide
		t    time.Duration
		cpu  time.Duration // the process's user+system CPU time while this side ran
	}{{name: "switched", from: x, to: y}, {name: "forwarded", from: x, to: w}, {name: "xsk", from: o, to: p}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wcs := make([]roce.WC, depth)
	for i := range sides {
		sides[i].wr, sides[i].s, _ = writePair(b, sides[i].from, sides[i].to, size, false, benchAccess)
		benchWrite(ctx, b, sides[i].s, sides[i].wr, round, wcs) // warm up: the windows open
	}
	b.SetBytes(size)
	b.ResetTimer()
	for left := b.N; left > 0; left -= round {
		for i := range sides {
			t0, c0 := time.Now(), processCPU(b)
			benchWrite(ctx, b, sides[i].s, sides[i].wr, min(round, left), wcs)
			sides[i].t += time.Since(t0)
			sides[i].cpu += processCPU(b) - c0
		}
	}
	b.StopTimer()
	mb := float64(b.N) * size / 1e6
	for _, s := range sides {
		b.ReportMetric(mb/s.t.Seconds(), s.name+"-MB/s")
		b.ReportMetric(float64(s.cpu.Microseconds())/float64(b.N), s.name+"-cpu-us/op")
	}
	b.ReportMetric(sides[2].t.Seconds()/sides[0].t.Seconds(), "switched/xsk")
	b.ReportMetric(sides[2].t.Seconds()/sides[1].t.Seconds(), "forwarded/xsk")
}

// processCPU is the user and system CPU time this process used so far:
// every side runs in the test process (daemon, clients, AF_XDP devices),
// one side at a time, so the difference over a side's rounds is its cost,
// which depends less on the machine's load than its rate.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPrivilegedDaemonSendLatency: issue 17's same-host round trip:
// an 8-byte SEND answered by an 8-byte SEND between two clients of a
// daemon, alternated one round trip at a time with the same between two
// devices over link/udp on loopback (127.0.0.1 and 127.0.0.2 in the
// daemon's namespace), reporting each side's median and 99th percentile
// in microseconds and the ratio of the medians daemon/udp (target < 1);
// nothing is asserted. Neither side busy-polls.
// Run it alone: flock /tmp/xdproce-bench.lock go test -run '^$' -bench
// PrivilegedDaemonSendLatency ./internal/daemon
func BenchmarkPrivilegedDaemonSendLatency(b *testing.B) {
	netlab.Privileged(b)
	topo, x, y, _ := daemonClientsIn(b)
	var u [2]*roce.Device
	if err := topo.A.NS.Do(func() error {
		for i, a := range []string{"127.0.0.1", "127.0.0.2"} {
			addr := netip.MustParseAddr(a)
			l, err := udp.Open(udp.Config{Addr: addr, MTU: 1500})
			if err != nil {
				return err
			}
			if u[i], err = roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{addr}}); err != nil {
				l.Close()
				return err
			}
			b.Cleanup(func() { u[i].Close() })
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pairs := []*pingPair{newPingPair(b, x, y), newPingPair(b, u[0], u[1])}
	lat := [2][]time.Duration{make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)}
	for range 100 { // warm up
		for _, p := range pairs {
			p.roundTrip(ctx, b)
		}
	}
	b.ResetTimer()
	for range b.N {
		for i, p := range pairs {
			lat[i] = append(lat[i], p.roundTrip(ctx, b))
		}
	}
	b.StopTimer()
	var p50 [2]time.Duration
	for i, name := range []string{"daemon", "udp"} {
		slices.Sort(lat[i])
		p50[i] = lat[i][len(lat[i])/2]
		b.ReportMetric(float64(p50[i].Nanoseconds())/1e3, name+"-p50-us")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Nanoseconds())/1e3, name+"-p99-us")
	}
	b.ReportMetric(float64(p50[0])/float64(p50[1]), "p50-daemon/udp")
}

// pingPair is two connected queue pairs for 8-byte SEND round trips, each
// with receives posted into its buffer's second half.
type pingPair struct {
	a, b *scriptSide
	wcs  []roce.WC
}

func newPingPair(tb testing.TB, from, to *roce.Device) *pingPair {
	_, a, b := writePair(tb, from, to, 4096, false, benchAccess)
	p := &pingPair{a: a, b: b, wcs: make([]roce.WC, 16)}
	for range 16 {
		p.repost(tb, a)
		p.repost(tb, b)
	}
	return p
}

func (p *pingPair) repost(tb testing.TB, s *scriptSide) {
	if err := s.qp.PostRecv(roce.RecvWR{SGL: []roce.SGE{{Addr: s.mr.Addr() + 2048, Length: 2048, LKey: s.mr.LKey()}}}); err != nil {
		tb.Fatal(err)
	}
}

// send posts an 8-byte inline SEND on s.
func (p *pingPair) send(tb testing.TB, s *scriptSide) {
	wr := roce.SendWR{Opcode: roce.WRSend, Flags: roce.Signaled | roce.Inline,
		SGL: []roce.SGE{{Addr: s.mr.Addr(), Length: 8, LKey: s.mr.LKey()}}}
	if err := s.qp.PostSend(wr); err != nil {
		tb.Fatal(err)
	}
}

// received waits for s's next receive completion (taking the send
// completions that come with it) and posts the receive again.
func (p *pingPair) received(ctx context.Context, tb testing.TB, s *scriptSide) {
	for {
		k, err := s.cq.Wait(ctx, p.wcs)
		if err != nil {
			tb.Fatal(err)
		}
		got := false
		for _, wc := range p.wcs[:k] {
			if wc.Status != roce.WCSuccess {
				tb.Fatalf("completion %+v", wc)
			}
			got = got || wc.Opcode == roce.WCRecv
		}
		if got {
			p.repost(tb, s)
			return
		}
	}
}

// roundTrip is one SEND a → b answered by one SEND b → a.
func (p *pingPair) roundTrip(ctx context.Context, tb testing.TB) time.Duration {
	t0 := time.Now()
	p.send(tb, p.a)
	p.received(ctx, tb, p.b)
	p.send(tb, p.b)
	p.received(ctx, tb, p.a)
	return time.Since(t0)
}
