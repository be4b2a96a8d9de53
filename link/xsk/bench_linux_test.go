package xsk_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
)

// BenchmarkPrivilegedXSKRaw measures the raw AF_XDP frame ceiling in one
// direction over veth between two namespaces (MTU 9000): A's socket sends
// b.N frames of the given size; B's socket receives them (steered by the XDP
// program). The sender keeps at most window frames ahead of the receiver —
// without that, copy-mode RX drops whatever overflows B's rings and the
// figure would count frames nobody got. Reported: received frames/s, Gb/s of
// Ethernet frame bytes, and the fraction lost (should stay near 0).
func BenchmarkPrivilegedXSKRaw(b *testing.B) {
	netlab.Privileged(b)
	topo := netlab.Pair(b, netlab.LinkConfig{MTU: 9000})
	for _, mode := range []bpf.Mode{bpf.ModeNative, bpf.ModeGeneric} {
		for _, size := range []int{64, 1024, pmtu4096Frame} {
			b.Run(fmt.Sprintf("%v/%dB", mode, size), func(b *testing.B) {
				tx := openEnd(b, topo.A, mode, nil)
				rx := openEnd(b, topo.B, mode, nil)
				benchRaw(b, tx, rx, size)
			})
		}
	}
}

func benchRaw(b *testing.B, tx, rx *end, size int) {
	// Prepare one template frame; each send copies it into a UMEM buffer, as
	// the engine would write a frame.
	tmpl := putRoCE(make([]byte, size), tx.If, rx.If, 0, size)
	var received atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		frames := make([][]byte, 64)
		for {
			n, err := rx.Sock.Receive(frames)
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
			rx.Sock.Wait(time.Millisecond)
		}
	}()
	bufs := make([][]byte, 64)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	const window = 1024 // half of B's RX ring
	for sent := 0; sent < b.N; {
		if int64(sent)-received.Load() > window {
			for spin := 0; int64(sent)-received.Load() > window; spin++ {
				if spin > 1000 {
					// Frames were lost: stop waiting for them.
					sent = int(received.Load()) + window/2
					break
				}
				time.Sleep(time.Microsecond)
			}
		}
		k := tx.Sock.Alloc(bufs[:min(len(bufs), b.N-sent)])
		for i := range k {
			bufs[i] = bufs[i][:copy(bufs[i], tmpl)]
		}
		if err := tx.Sock.Send(bufs[:k]); err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	// Let the receiver drain: stop when nothing more arrives for 20 ms.
	last, lastT := received.Load(), time.Now()
	for received.Load() < int64(b.N) && time.Since(lastT) < 20*time.Millisecond {
		time.Sleep(time.Millisecond)
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
	rx.Sock.Wake()
	<-done
	r := float64(received.Load())
	sec := el.Seconds()
	b.ReportMetric(r/sec, "frames/s")
	b.ReportMetric(r*float64(size)*8/sec/1e9, "Gb/s")
	b.ReportMetric(1-r/float64(b.N), "lost")
}
