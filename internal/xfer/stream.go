package xfer

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// A contentDst is where getRC puts what it receives: a temporary file renamed
// into place (tempFile, for Get) or a stream (streamSink, for GetStream).
type contentDst interface {
	io.WriterAt
	// begin is called once the server accepted the request asked (with the
	// span asked for, nil for the whole file), before any data.
	begin(asked *Span, acc *message) error
	// commit is called once the content's SHA-256 is verified.
	commit(overwrite bool) error
}

func (t *tempFile) begin(*Span, *message) error { return nil }

// GetStream fetches name, or the span of it sp asks for (nil: all of it;
// see span.go), from the server at the other end of conn into dev (written
// into this side's lmrm pool, or by RDMA READ from an older server), and
// writes it to the writer start returns. start is called once the
// server has accepted the request, before any data moves, with the span
// resolved (for the whole file: From 0, Count and Total its size); an error
// from it ends the transfer. Content goes to the writer in order, a slot at
// a time, and a slot is freed for the server only once written: a slow
// writer slows the transfer, and memory stays at the staging buffer or pool
// (Options.SlotSize × Options.Slots) plus one slot. That one slot, the
// last written, is held back until the SHA-256 is verified, so a writer
// never receives the complete content of a transfer that fails (an HTTP
// response with a Content-Length is cut short instead). A span needs a
// server with cm.CapRange (dial with it in cm.Config.Require); Options.OOO
// and Options.Enlarge are not taken. conn is closed on return.
func GetStream(ctx context.Context, dev *roce.Device, conn *cm.Conn, name string, sp *Span, start func(Span) (io.Writer, error), opts *Options) (Result, error) {
	o := opts.withDefaults()
	err := ValidName(name)
	switch {
	case err != nil:
	case o.OOO != nil || o.Enlarge != nil:
		err = errors.New("get to a stream: OOO mode and enlargement channels are not supported")
	case sp != nil && !conn.PeerHas(cm.CapRange):
		err = fmt.Errorf("get a span of %q: the server lacks %q (an older xdproce)", name, cm.CapRange)
	}
	if err != nil {
		conn.Close()
		return Result{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := newCtrl(ctx, conn)
	defer c.close()
	return getRC(ctx, c, dev, name, sp, &streamSink{start: start}, &o)
}

// streamSink passes content on to a writer in order, holding back the last
// slot until commit.
type streamSink struct {
	start func(Span) (io.Writer, error)
	w     io.Writer
	off   int64  // bytes taken so far
	held  []byte // the last slot, not yet written
}

func (s *streamSink) begin(asked *Span, acc *message) error {
	sp := Span{Count: acc.Size, Total: acc.Size}
	if asked != nil {
		got := acc.Span
		if got == nil || got.Count != acc.Size || got.From < 0 || got.From+got.Count > got.Total {
			return fmt.Errorf("server answered a span request with %+v for %d bytes", got, acc.Size)
		}
		sp = *got
	}
	w, err := s.start(sp)
	if err != nil {
		return err
	}
	s.w = w
	return nil
}

func (s *streamSink) WriteAt(b []byte, off int64) (int, error) {
	if off != s.off {
		return 0, fmt.Errorf("stream: %d bytes at %d, want them at %d", len(b), off, s.off)
	}
	if err := s.flush(); err != nil {
		return 0, err
	}
	s.held = append(s.held[:0], b...)
	s.off += int64(len(b))
	return len(b), nil
}

func (s *streamSink) flush() error {
	if len(s.held) == 0 {
		return nil
	}
	_, err := s.w.Write(s.held)
	s.held = s.held[:0]
	if err != nil {
		return fmt.Errorf("write to the stream: %w", err)
	}
	return nil
}

func (s *streamSink) commit(bool) error { return s.flush() }
