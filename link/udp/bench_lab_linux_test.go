//go:build linux

package udp_test

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/udp"
)

// BenchmarkPrivilegedUDPGSO moves RoCEv2 frames with a 4 KiB payload
// (4154-byte frames) from a link in one namespace to a link in another over
// a veth pair (MTU 9000), one datagram per frame (NoGSO) against GSO/GRO, in
// one run. The sender keeps at most 4096 frames (16 MiB) in flight, within the 32 MiB socket buffers; frames/s and Gb/s
// count frames received (Gb/s over whole frames); cpu-ns/frame is the
// process's user and system time (the veth and the receiving socket's
// softirq work runs in the sender's system calls) per frame received, the
// figure that holds on a loaded machine. One op is one frame.
func BenchmarkPrivilegedUDPGSO(b *testing.B) {
	netlab.Privileged(b)
	topo := netlab.Pair(b, netlab.LinkConfig{MTU: 9000})
	for _, mode := range []struct {
		name  string
		noGSO bool
	}{{"plain", true}, {"GSO", false}} {
		b.Run(mode.name, func(b *testing.B) {
			tx := openInNS(b, topo.A, udp.Config{Addr: topo.A.IPv4, NoGSO: mode.noGSO, SocketBuffer: 32 << 20})
			rx := openInNS(b, topo.B, udp.Config{Addr: topo.B.IPv4, NoGSO: mode.noGSO, SocketBuffer: 32 << 20})
			tmpl := encode(b, topo.A.IPv4, topo.B.IPv4, tx.Props().SrcPort, 0, 0, 64, make([]byte, 4096))
			var received atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				frames := make([][]byte, 64)
				for {
					n, err := rx.Receive(frames)
					if err != nil {
						return
					}
					received.Add(int64(n))
					if n == 0 {
						select {
						case <-stop:
							return
						default:
						}
						rx.Wait(time.Millisecond)
					}
				}
			}()
			bufs := make([][]byte, 64)
			b.ReportAllocs()
			b.SetBytes(int64(len(tmpl)))
			cpu0 := cpuTime()
			b.ResetTimer()
			sent := 0
			for sent < b.N {
				for int64(sent)-received.Load() > 4096 {
					time.Sleep(20 * time.Microsecond)
				}
				n := tx.Alloc(bufs[:min(len(bufs), b.N-sent)])
				for i := range n {
					bufs[i] = bufs[i][:copy(bufs[i], tmpl)]
				}
				if err := tx.Send(bufs[:n]); err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			for deadline := time.Now().Add(2 * time.Second); received.Load() < int64(sent) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			el := b.Elapsed().Seconds()
			cpu := cpuTime() - cpu0
			close(stop)
			rx.Wake()
			<-done
			got := float64(received.Load())
			b.ReportMetric(got/el, "frames/s")
			b.ReportMetric(got*float64(len(tmpl))*8/el/1e9, "Gb/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/got, "cpu-ns/frame")
			if s := tx.Stats(); s.TxDropped+s.TxErrors > 0 || received.Load() < int64(sent) {
				b.Logf("sent %d, received %d; sender %+v; receiver %+v", sent, received.Load(), s, rx.Stats())
			}
		})
	}
}

// cpuTime returns the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
