package shm_test

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/link/shm"
)

// BenchmarkShm moves batches of 32 frames from the creator's end to the
// attached one in one goroutine, as link/pipe's BenchmarkPipe does: Alloc,
// fill the headers, Send (no copy: a descriptor each), Receive. Only one
// byte of each frame is written, so this is the cost of the descriptor
// path (its Gb/s is not a copy rate; BenchmarkPipe copies every frame).
func BenchmarkShm(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			a, z := newPair(b, shm.Config{MTU: 9000})
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
			reportRate(b, batch, size)
		})
	}
}

func reportRate(b *testing.B, perOp, size int) {
	fps := float64(b.N) * float64(perOp) / b.Elapsed().Seconds()
	b.ReportMetric(fps, "frames/s")
	b.ReportMetric(fps*float64(size)*8/1e9, "Gb/s")
}

// BenchmarkStream4K streams 4 KiB frames one way between two goroutines:
// the sender copies a 4 KiB payload into each buffer and sends batches of
// 32 as fast as the ring takes them,
// the receiver receives and reads one byte of each, sleeping in Wait when
// the ring is empty (the sender signals only then). ns/op is per frame.
func BenchmarkStream4K(b *testing.B) {
	for _, kind := range []string{"shm", "pipe"} {
		b.Run(kind, func(b *testing.B) {
			a, z, inFlight := benchPair(b, kind)
			const size = 4096
			done := make(chan int)
			total := b.N
			go func() {
				frames := make([][]byte, 64)
				got, sum := 0, 0
				for got < total {
					n, err := z.Receive(frames)
					if err != nil {
						break
					}
					for _, f := range frames[:n] {
						sum += int(f[size-1])
					}
					got += n
					if n == 0 {
						z.Wait(100 * time.Millisecond)
					}
				}
				done <- sum
			}()
			bufs := make([][]byte, 32)
			payload := make([]byte, size)
			payload[size-1] = 1
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < total; {
				n := a.Alloc(bufs[:min(32, total-sent)])
				for i := range n {
					bufs[i] = bufs[i][:copy(bufs[i], payload)]
				}
				if err := a.Send(bufs[:n]); err != nil {
					b.Fatal(err)
				}
				sent += n
				// Flow control: stay within the ring, so that nothing
				// overflows and every frame is received.
				for inFlight() > 128 {
					runtime.Gosched()
				}
			}
			if sum := <-done; sum != total {
				b.Fatalf("received %d frames of %d", sum, total)
			}
			reportRate(b, 1, size)
			if d, ok := a.(*shm.Link); ok {
				b.ReportMetric(float64(d.Stats().Wakeups)/float64(total), "wakeups/frame")
			}
		})
	}
}

// BenchmarkPingPong bounces one 64-byte frame between two goroutines that
// each sleep in Wait(-1) until it arrives: ns/op is one round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, kind := range []string{"shm", "pipe"} {
		b.Run(kind, func(b *testing.B) {
			a, z, _ := benchPair(b, kind)
			go func() {
				bufs, frames := make([][]byte, 1), make([][]byte, 4)
				for bounce(z, bufs, frames) == nil {
				}
			}()
			pingPong(b, a)
		})
	}
}

// pingPong sends a 64-byte frame on a and waits for the answer, b.N times.
func pingPong(b *testing.B, a link.Link) {
	bufs, frames := make([][]byte, 1), make([][]byte, 4)
	b.ReportAllocs()
	for b.Loop() {
		if a.Alloc(bufs) != 1 {
			b.Fatal("no buffer")
		}
		bufs[0] = bufs[0][:64]
		if err := a.Send(bufs); err != nil {
			b.Fatal(err)
		}
		if err := awaitOne(a, frames); err != nil {
			b.Fatal(err)
		}
	}
}

// bounce waits for one frame on l and sends one back.
func bounce(l link.Link, bufs, frames [][]byte) error {
	if err := awaitOne(l, frames); err != nil {
		return err
	}
	if l.Alloc(bufs) != 1 {
		return nil
	}
	bufs[0] = bufs[0][:64]
	return l.Send(bufs)
}

func awaitOne(l link.Link, frames [][]byte) error {
	for {
		n, err := l.Receive(frames)
		if err != nil || n > 0 {
			return err
		}
		if err := l.Wait(-1); err != nil {
			return err
		}
	}
}

// benchPair returns two connected ends of a link of the kind and a function
// saying how many frames a has sent that z has not yet received.
func benchPair(b *testing.B, kind string) (a, z link.Link, inFlight func() int) {
	if kind == "pipe" {
		a, z, err := pipe.New(pipe.Config{MTU: shm.DefaultMTU, Depth: shm.DefaultRing, TxBuffers: shm.DefaultRing})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close(); z.Close() })
		return a, z, func() int { st := a.Stats(); return int(st.Delivered - st.Received) }
	}
	d, c := newPair(b, shm.Config{})
	return d, c, func() int { return int(d.Stats().Sent - c.Stats().Received) }
}

// BenchmarkCrossProcess runs between this process and a re-executed test
// binary holding the attached end: Stream4K sends 4 KiB frames (payload
// copied in, as an engine writes it) to a child that counts them (ns/op per
// frame; frames the full ring refuses are sent again, so every one
// arrives); PingPong bounces a 64-byte frame off a child that echoes it,
// both sides asleep in Wait(-1) (ns/op per round trip).
func BenchmarkCrossProcess(b *testing.B) {
	b.Run("Stream4K", func(b *testing.B) {
		d, conn := benchChild(b, "sink")
		const size = 4096
		payload := make([]byte, size)
		bufs := make([][]byte, 32)
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		base := d.Stats().Sent
		for int(d.Stats().Sent-base) < b.N {
			n := d.Alloc(bufs[:min(32, b.N-int(d.Stats().Sent-base))])
			for i := range n {
				bufs[i] = bufs[i][:copy(bufs[i], payload)]
			}
			before := d.Stats().Sent
			if err := d.Send(bufs[:n]); err != nil {
				b.Fatal(err)
			}
			if int(d.Stats().Sent-before) < n {
				runtime.Gosched() // the ring was full: let the child catch up
			}
		}
		b.StopTimer()
		marker := make([][]byte, 1)
		for d.Stats().Sent-base == uint64(b.N) {
			if d.Alloc(marker) == 1 {
				marker[0][0] = 0xff
				d.Send(marker)
			}
		}
		var got int
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fscan(conn, &got); err != nil || got <= b.N {
			b.Fatalf("the child counted %d frames of %d (%v)", got, b.N+1, err)
		}
		reportRate(b, 1, size)
		st := d.Stats()
		b.ReportMetric(float64(st.Wakeups)/float64(b.N), "wakeups/frame")
		b.ReportMetric(float64(st.Overflow)/float64(b.N), "refused/frame")
	})
	b.Run("PingPong", func(b *testing.B) {
		d, _ := benchChild(b, "echo")
		pingPong(b, d)
	})
}

// benchChild starts a child in role and passes it the attaching end of a
// fresh port; it returns the creator's end.
func benchChild(b *testing.B, role string) (*shm.Link, *net.UnixConn) {
	_, conn := startChild(b, role)
	d, fds, err := shm.NewPort(shm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	if err := shm.SendPort(conn, fds); err != nil {
		b.Fatal(err)
	}
	return d, conn
}
