package shm

import (
	"runtime"
	"testing"
)

// TestSendCopyQuiet: a frame queued quietly while the peer sleeps in Wait
// does not signal it (no wake-up counted, its need-wakeup flag still up);
// Kick does, once, and the peer then reads the frame. A ring more than
// half full is reported crowded (one under half is not).
func TestSendCopyQuiet(t *testing.T) {
	port, fds, err := NewPort(Config{MTU: 1500, Ring: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	end, err := Attach(fds)
	if err != nil {
		t.Fatal(err)
	}
	defer end.Close()
	woke := make(chan error, 1)
	go func() { woke <- end.Wait(-1) }()
	for i := 0; end.rx.need.Load() == 0; i++ {
		if i == 1e7 {
			t.Fatal("the peer never slept")
		}
		runtime.Gosched()
	}
	frame := make([]byte, 60)
	frame[0] = 0xAB
	queued, crowded, err := port.SendCopyQuiet(frame)
	if !queued || crowded || err != nil {
		t.Fatalf("SendCopyQuiet: %v %v %v", queued, crowded, err)
	}
	if w := port.Stats().Wakeups; w != 0 || end.rx.need.Load() != 1 {
		t.Fatalf("a quiet frame signalled the peer: %d wake-ups, flag %d", w, end.rx.need.Load())
	}
	port.Kick()
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	if w := port.Stats().Wakeups; w != 1 {
		t.Fatalf("Kick: %d wake-ups", w)
	}
	port.Kick() // nobody sleeps: no signal
	if w := port.Stats().Wakeups; w != 1 {
		t.Fatalf("a second Kick signalled: %d wake-ups", w)
	}
	rx := make([][]byte, 16)
	if n, _ := end.Receive(rx); n != 1 || rx[0][0] != 0xAB {
		t.Fatalf("received %d frames", n)
	}
	end.Receive(rx) // hands the frame back
	for i := range 16 {
		queued, crowded, _ = port.SendCopyQuiet(frame)
		if !queued {
			t.Fatalf("frame %d not queued", i)
		}
		// The count is the sender's view (the peer's head as last read): it
		// may lag by frames read since, never run ahead.
		if i < 6 && crowded || i == 15 && !crowded {
			t.Fatalf("frame %d (of a ring of 16): crowded %v", i, crowded)
		}
	}
}
