package cli

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestInWindow: inWindow runs every step with at most cmatoseWindow
// exchanges at once; the first failing exchange cancels the others and
// stops the preparing of more, and its error is returned after every
// exchange started has ended.
func TestInWindow(t *testing.T) {
	var running, most, ran atomic.Int32
	// An exchange fails, waits for the run's cancellation, or ends at once.
	exchange := func(fail, wait bool) func(context.Context) error {
		return func(ctx context.Context) error {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			ran.Add(1)
			if fail {
				return errors.New("refused")
			}
			if wait {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
	}
	if err := inWindow(t.Context(), 1000, func(context.Context, int) (func(context.Context) error, error) { return exchange(false, false), nil }); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1000 || most.Load() > cmatoseWindow || running.Load() != 0 {
		t.Fatalf("%d of 1000 exchanges ran, %d at most at once (window %d), %d still running", ran.Load(), most.Load(), cmatoseWindow, running.Load())
	}
	// The 101st fails; the ones after it wait, so the window fills and
	// preparing stops there until the failure cancels the run.
	prepared := 0
	err := inWindow(t.Context(), 1000, func(_ context.Context, i int) (func(context.Context) error, error) {
		prepared++
		return exchange(i == 100, i > 100), nil
	})
	if err == nil || err.Error() != "refused" || running.Load() != 0 {
		t.Fatalf("error %v, want the failing exchange's; %d still running", err, running.Load())
	}
	if prepared > 101+cmatoseWindow {
		t.Fatalf("%d steps prepared, the 101st failing (window %d)", prepared, cmatoseWindow)
	}
	err = inWindow(t.Context(), 10, func(_ context.Context, i int) (func(context.Context) error, error) {
		if i == 3 {
			return nil, errors.New("no queue pair")
		}
		return exchange(false, false), nil
	})
	if err == nil || err.Error() != "no queue pair" {
		t.Fatalf("a failing step: %v", err)
	}
}
