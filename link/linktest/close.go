package linktest

import (
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
)

func testClose(t *testing.T, p Pair) {
	bufs := make([][]byte, 2)
	if p.A.Alloc(bufs) != 2 {
		t.Fatal("Alloc gave fewer than 2 buffers")
	}
	if err := p.A.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := p.A.Close(); !errors.Is(err, link.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if err := p.A.Send(bufs[:1]); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	p.A.Free(bufs[1:]) // must not panic
	if _, err := p.A.Receive(make([][]byte, 4)); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Receive after Close: %v, want ErrClosed", err)
	}
	if err := p.A.Wait(10 * time.Millisecond); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Wait after Close: %v, want ErrClosed", err)
	}
	p.A.Wake() // must not panic
	_ = p.A.Props()
	if n := p.A.Alloc(make([][]byte, 4)); n != 0 {
		t.Errorf("Alloc after Close gave %d buffers", n)
	}
	// The other end still works on its own.
	if _, err := p.B.Receive(make([][]byte, 4)); err != nil {
		t.Errorf("Receive on the open end after its peer closed: %v", err)
	}
}

func testCloseWakesWait(t *testing.T, p Pair) {
	settle(p.B)
	done := make(chan error, 1)
	go func() { done <- p.B.Wait(-1) }()
	time.Sleep(30 * time.Millisecond)
	p.B.Close()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, link.ErrClosed) {
			t.Errorf("Wait interrupted by Close: %v, want nil or ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait(-1) did not return after a concurrent Close")
	}
}
