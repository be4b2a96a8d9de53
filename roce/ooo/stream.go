package ooo

import (
	"context"
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/roce"
)

// A Stream is a Write that takes byte ranges while it runs: each is cut
// into operations as Write does, and the operations of several ranges are
// in flight together, so the last, retried operations of one range do not
// hold up the next. Add queues a range; Close waits until every range is
// delivered. The writer serves no other call until Close.
type Stream struct {
	in     chan op
	end    chan struct{} // closed when the stream has ended
	err    error         // why, once end is closed
	closed bool
}

// Stream starts a Write stream (notify as for Write). delivered, when not
// nil, is called with each range once it is delivered whole, in the order
// the ranges were added, on the stream's goroutine; an error from it ends
// the stream with that error.
func (w *Writer) Stream(ctx context.Context, notify roce.Notify, delivered func(local, remote uint64, n int) error) (*Stream, error) {
	return w.stream(ctx, notify, delivered, nil)
}

// stream starts a Stream, ending with commit c when not nil (StreamCommit).
func (w *Writer) stream(ctx context.Context, notify roce.Notify, delivered func(local, remote uint64, n int) error, c *Commit) (*Stream, error) {
	if err := checkNotify(notify); err != nil {
		return nil, err
	}
	w.mu.Lock()
	if w.slots[0].local == 0 {
		w.mu.Unlock()
		return nil, errors.New("ooo: writer closed")
	}
	if c != nil {
		if err := w.beginCommit(*c); err != nil {
			w.mu.Unlock()
			return nil, err
		}
	}
	s := &Stream{in: make(chan op, 16), end: make(chan struct{})}
	go func() {
		err := w.endCommit(w.run(ctx, false, notify, s.in, delivered))
		w.mu.Unlock()
		s.err = err
		close(s.end)
	}()
	return s, nil
}

// Add queues bytes [local, local+n) of the local buffer for [remote,
// remote+n) of the peer's region. It fails once the stream has ended (an
// operation failed MaxTries times, ctx ended, delivered failed).
func (s *Stream) Add(local, remote uint64, n int) error {
	if n < 0 {
		return fmt.Errorf("ooo: negative length %d", n)
	}
	if s.closed {
		return errors.New("ooo: stream closed")
	}
	select {
	case <-s.end:
		return s.err
	default:
	}
	select {
	case s.in <- op{local: local, remote: remote, n: n}:
		return nil
	case <-s.end:
		return s.err
	}
}

// Done is closed when the stream has ended: every range delivered after
// Close, or early (Close says why).
func (s *Stream) Done() <-chan struct{} { return s.end }

// Close adds no more ranges, waits until the stream has ended and returns
// why it ended early (nil: every range was delivered).
func (s *Stream) Close() error {
	if !s.closed {
		s.closed = true
		close(s.in)
	}
	<-s.end
	return s.err
}
