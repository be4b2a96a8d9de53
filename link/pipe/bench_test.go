package pipe_test

import (
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
)

// BenchmarkPipe moves batches of 32 frames from a to b in one goroutine:
// Alloc, fill the headers, Send (copy into b's queue), Receive.
func BenchmarkPipe(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(itoa(size)+"B", func(b *testing.B) {
			a, z, err := pipe.New(pipe.Config{MTU: 9000})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			defer z.Close()
			const batch = 32
			bufs := make([][]byte, batch)
			frames := make([][]byte, batch)
			b.ReportAllocs()
			b.SetBytes(batch * int64(size))
			for b.Loop() {
				n := a.Alloc(bufs)
				for i := range n {
					bufs[i] = bufs[i][:size]
					bufs[i][0] = byte(i)
				}
				if err := a.Send(bufs[:n]); err != nil {
					b.Fatal(err)
				}
				if got, _ := z.Receive(frames); got != n {
					b.Fatalf("received %d of %d", got, n)
				}
			}
			fps := float64(b.N) * batch / b.Elapsed().Seconds()
			b.ReportMetric(fps, "frames/s")
			b.ReportMetric(fps*float64(size)*8/1e9, "Gb/s")
		})
	}
}
