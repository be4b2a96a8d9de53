//go:build linux

package udp_test

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/udp"
)

// BenchmarkUDPLoopback moves batches of 32 frames from a to b over the
// loopback in one goroutine: Alloc, fill, Send (sendmmsg), Receive
// (recvmmsg) with rebuilt headers. Frames/s and Gb/s count frames received.
func BenchmarkUDPLoopback(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(itoa(size)+"B", func(b *testing.B) {
			x, y := pairSamePort(b, udp.Config{MTU: 9000})
			tmpl := frame(lo1, lo2, 1, make([]byte, size-42))
			const batch = 32
			bufs := make([][]byte, batch)
			frames := make([][]byte, batch)
			received := 0
			b.ReportAllocs()
			b.SetBytes(batch * int64(size))
			for b.Loop() {
				n := x.Alloc(bufs)
				for i := range n {
					bufs[i] = bufs[i][:copy(bufs[i], tmpl)]
				}
				if err := x.Send(bufs[:n]); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < n; {
					k, err := y.Receive(frames)
					if err != nil {
						b.Fatal(err)
					}
					got += k
					received += k
					if k == 0 {
						y.Wait(10 * time.Millisecond)
						if k, _ := y.Receive(frames[:1]); k == 0 {
							break // lost on the loopback
						}
						got++
						received++
					}
				}
			}
			fps := float64(received) / b.Elapsed().Seconds()
			b.ReportMetric(fps, "frames/s")
			b.ReportMetric(fps*float64(size)*8/1e9, "Gb/s")
			if st := x.Stats(); st.TxDropped+st.TxErrors > 0 {
				b.Logf("sender %+v", st)
			}
		})
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// BenchmarkWake is the cost of a doorbell: Wake from another goroutine
// while nobody waits (coalesced after the first).
func BenchmarkWake(b *testing.B) {
	l := open(b, udp.Config{Addr: lo1, Port: -1})
	b.ReportAllocs()
	for b.Loop() {
		l.Wake()
	}
}
