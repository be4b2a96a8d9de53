package enlarge

import (
	"context"
	"runtime"
	"time"
)

// Write sends p as one message, blocking until all of it is on its way or
// Send fails (for a promotion whose ack never comes whole, ErrAckTimeout
// after Config.MaxAckTimeouts ack timeouts).
func (c *Channel) Write(p []byte) (int, error) { return c.WriteContext(context.Background(), p) }

// Read receives one message into p, blocking until it is complete. A message
// longer than p fills p and returns ErrShortBuffer; the next Read returns the
// rest.
func (c *Channel) Read(p []byte) (int, error) { return c.ReadContext(context.Background(), p) }

// WriteContext is Write with a context.
func (c *Channel) WriteContext(ctx context.Context, p []byte) (int, error) {
	n := 0
	var w waiter
	iov := [][]byte{nil}
	for n < len(p) {
		iov[0] = p[n:]
		k, err := c.Send(iov)
		n += k
		if err != nil {
			return n, err
		}
		if k > 0 {
			w.reset()
			continue
		}
		if err := w.wait(ctx); err != nil {
			return n, err
		}
	}
	return n, nil
}

// ReadContext is Read with a context.
func (c *Channel) ReadContext(ctx context.Context, p []byte) (int, error) {
	n := 0
	var w waiter
	for {
		k, end, err := c.Recv(p[n:])
		n += k
		if err != nil || end {
			return n, err
		}
		if n == len(p) && len(p) > 0 {
			return n, ErrShortBuffer
		}
		if k > 0 {
			w.reset()
			continue
		}
		if err := w.wait(ctx); err != nil {
			return n, err
		}
	}
}

// waiter backs off from yielding the processor to sleeps of up to 200 µs: a
// channel learns of progress only by polling (its peer's writes signal
// nothing but completions), so a blocked call polls, cheaply at first.
type waiter struct{ spins int }

const (
	waitSpins    = 500
	waitMaxSleep = 200 * time.Microsecond
	waitStep     = 10 * time.Microsecond
)

func (w *waiter) reset() { w.spins = 0 }

func (w *waiter) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.spins++
	if w.spins < waitSpins {
		runtime.Gosched()
		return nil
	}
	time.Sleep(min(time.Duration(w.spins-waitSpins+1)*waitStep, waitMaxSleep))
	return nil
}
