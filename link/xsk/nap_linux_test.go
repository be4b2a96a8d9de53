package xsk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link"
)

// Nap is not woken by received frames (they wait in the RX ring and are all
// there afterwards), is woken by Wake, and fails with ErrClosed after Close;
// Wait, by contrast, returns at once while frames are waiting.
func TestPrivilegedNap(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 1500})
	a := openEnd(t, topo.A, bpf.ModeNative, nil)
	b := openEnd(t, topo.B, bpf.ModeNative, nil)
	var _ link.Napper = b.Sock

	// A first frame, to know that the path works and to start the nap with
	// the RX ring empty.
	send := func(count int) {
		t.Helper()
		bufs := make([][]byte, count)
		if n := a.Sock.Alloc(bufs); n != count {
			t.Fatalf("Alloc: %d buffers, want %d", n, count)
		}
		for i := range bufs {
			bufs[i] = putRoCE(bufs[i], topo.A, topo.B, uint32(i), 200)
		}
		if err := a.Sock.Send(bufs); err != nil {
			t.Fatal(err)
		}
	}
	frames := make([][]byte, 64)
	recv := func(want int, within time.Duration) {
		t.Helper()
		got := 0
		for end := time.Now().Add(within); got < want && time.Now().Before(end); {
			n, err := b.Sock.Receive(frames)
			if err != nil {
				t.Fatal(err)
			}
			got += n
			if n == 0 {
				b.Sock.Wait(10 * time.Millisecond)
			}
		}
		if got != want {
			t.Fatalf("received %d frames, want %d", got, want)
		}
	}
	send(1)
	recv(1, 5*time.Second)

	// Frames arriving during a nap do not end it.
	const nap = 300 * time.Millisecond
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		if err := b.Sock.Nap(nap); err != nil {
			t.Error(err)
		}
		done <- time.Since(start)
	}()
	time.Sleep(20 * time.Millisecond)
	send(10)
	if el := <-done; el < nap {
		t.Fatalf("Nap(%v) returned after %v: woken by the frames", nap, el)
	}
	// They all waited in the ring; Wait does not sleep while they are there.
	start := time.Now()
	if err := b.Sock.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("Wait with frames in the RX ring slept %v", el)
	}
	recv(10, time.Second)

	// Wake ends a nap without a limit.
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Sock.Wake()
	}()
	woke := make(chan error, 1)
	go func() { woke <- b.Sock.Nap(-1) }()
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Nap(-1) not woken by Wake")
	}

	if err := b.Sock.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Sock.Nap(time.Millisecond); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Nap after Close: %v, want ErrClosed", err)
	}
}
