package qp

import (
	"context"
	"testing"
	"time"
)

// TestWokeWaiters: a completion pushed while a goroutine blocks in Wait
// counts one wake-up of a waiter (the engine yields to it before it
// sleeps); one pushed with nobody waiting counts none, and the waiter
// gets its completion.
func TestWokeWaiters(t *testing.T) {
	c := NewCQ(8)
	before := WokeWaiters()
	c.push(&WC{ID: 1})
	if got := WokeWaiters(); got != before {
		t.Fatalf("a push with no waiter counted %d wake-ups", got-before)
	}
	wcs := make([]WC, 4)
	if n, _ := c.Poll(wcs); n != 1 {
		t.Fatalf("polled %d completions, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan WC, 1)
	go func() {
		if n, err := c.Wait(ctx, wcs); err == nil && n == 1 {
			got <- wcs[0]
		}
		close(got)
	}()
	for c.waiting.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the waiter never blocked")
		}
		time.Sleep(time.Millisecond)
	}
	c.push(&WC{ID: 2})
	wc, ok := <-got
	if !ok || wc.ID != 2 {
		t.Fatalf("the waiter got %+v, %v; want ID 2", wc, ok)
	}
	if n := WokeWaiters() - before; n != 1 {
		t.Fatalf("%d wake-ups counted, want 1", n)
	}
	if c.waiting.Load() != 0 {
		t.Fatalf("%d waiters left after Wait returned", c.waiting.Load())
	}
}
