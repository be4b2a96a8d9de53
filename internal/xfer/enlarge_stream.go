package xfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/xdproce/xdproce/enlarge"
)

// The content's way through an enlargement channel, the same for put_enlarge
// (client → server) and get_enlarge (server → client): the sending side cuts
// it into messages that climb the ladder, the receiving side appends them to
// its temporary file; the end message and the verdict go on the control
// connection, watched by a goroutine each side.

// sendContent reads size bytes of name from r and writes them through cc's
// channel, in messages of enlargeSizes, returning their SHA-256. Errors of
// the content (a failed read, more than size bytes in r: the file grew while
// being sent) are also told to the peer on c; those of the channel come back
// as they are.
func sendContent(ctx context.Context, c *ctrl, cc *chanConn, r io.Reader, size int64, name string, progress func(done, total int64)) (string, error) {
	steps, rest := enlargeSizes(cc.ch.Config())
	buf := make([]byte, max(rest, 1))
	h := sha256.New()
	var off int64
	for i := 0; off < size; i++ {
		if ctx.Err() != nil {
			return "", ctxErr(ctx, nil)
		}
		n := rest
		if i < len(steps) {
			n = steps[i]
		}
		n = int(min(int64(n), size-off))
		b := buf[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			return "", refuse(c, fmt.Errorf("read %s at %d: %w", name, off, err))
		}
		h.Write(b)
		if _, err := cc.ch.WriteContext(ctx, b); err != nil {
			return "", ctxErr(ctx, fmt.Errorf("enlargement channel: %w", err))
		}
		off += int64(n)
		if progress != nil {
			progress(off, size)
		}
	}
	var extra [1]byte
	if n, _ := r.Read(extra[:]); n > 0 {
		return "", refuse(c, fmt.Errorf("read %s: the file grew while being sent", name))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// recvContent reads size bytes of name from cc's channel into f and returns
// their SHA-256. Errors of the content (more bytes than announced, a failed
// write to f) are also told to the peer on c; those of the channel come back
// as they are.
func recvContent(ctx context.Context, c *ctrl, cc *chanConn, f *os.File, size int64, name string, progress func(done, total int64)) (string, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var next int64
	for next < size {
		n, err := cc.ch.ReadContext(ctx, buf)
		if err != nil && !errors.Is(err, enlarge.ErrShortBuffer) {
			return "", ctxErr(ctx, fmt.Errorf("receive %s after %d of %d bytes: enlargement channel: %w", name, next, size, err))
		}
		if next+int64(n) > size {
			return "", refuse(c, fmt.Errorf("more than the %d bytes announced", size))
		}
		if err := appendSlot(f, h, buf[:n], next); err != nil {
			return "", refuse(c, err)
		}
		next += int64(n)
		if progress != nil {
			progress(next, size)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// watchVerdict reads the receiving side's verdict (ok or error) from the
// control connection; an error, anything else or the connection's end
// cancels ctx (cause: a RemoteError for an error message).
func watchVerdict(c *ctrl, cancel context.CancelCauseFunc) <-chan message {
	final := make(chan message, 1)
	go func() {
		var m message
		if err := c.recv(&m); err != nil {
			cancel(err)
			return
		}
		switch m.Type {
		case msgOK, msgError:
			if m.Type == msgError {
				cancel(&RemoteError{Msg: m.Error})
			}
			final <- m
		default:
			cancel(fmt.Errorf("control connection: unexpected %q during the transfer", m.Type))
		}
	}()
	return final
}

// awaitVerdict waits for the verdict and checks it against sum, keeping the
// channel running meanwhile: it does its protocol work (the completions of
// the last writes) only inside its calls. peer names the receiving side in
// errors.
func awaitVerdict(ctx context.Context, cc *chanConn, final <-chan message, sum, peer string) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m := <-final:
			if m.Type == msgError {
				return &RemoteError{Msg: m.Error}
			}
			if m.SHA256 != sum {
				return fmt.Errorf("checksum mismatch: sent sha256 %s, %s has %s", sum, peer, m.SHA256)
			}
			return nil
		case <-ctx.Done():
			return ctxErr(ctx, nil)
		case <-tick.C:
			if err := cc.ch.Progress(); err != nil {
				return ctxErr(ctx, fmt.Errorf("enlargement channel: %w", err))
			}
		}
	}
}

// watchEnd reads the sending side's end message from the control
// connection; an error message, anything else, a second end or the
// connection's end cancels ctx.
func watchEnd(c *ctrl, cancel context.CancelCauseFunc) <-chan message {
	end := make(chan message, 1)
	go func() {
		for {
			var m message
			if err := c.recv(&m); err != nil {
				cancel(err)
				return
			}
			switch m.Type {
			case msgEnd:
				select {
				case end <- m:
				default:
					cancel(errors.New("control connection: second end message"))
					return
				}
			case msgError:
				cancel(&RemoteError{Msg: m.Error})
				return
			default:
				cancel(fmt.Errorf("control connection: unexpected %q during the transfer", m.Type))
				return
			}
		}
	}()
	return end
}

// awaitEnd waits for the end message of a transfer whose size bytes arrived
// with SHA-256 sum and checks it; a mismatch is told to the peer on c.
func awaitEnd(ctx context.Context, c *ctrl, end <-chan message, size int64, sum, name, peer string) error {
	var m message
	select {
	case m = <-end:
	case <-ctx.Done():
		return fmt.Errorf("receive %s: no end message after all %d bytes: %w", name, size, context.Cause(ctx))
	}
	if m.Size != size {
		return refuse(c, fmt.Errorf("end after %d of %d bytes", m.Size, size))
	}
	if m.SHA256 != sum {
		return refuse(c, fmt.Errorf("checksum mismatch: received sha256 %s, %s sent %s", sum, peer, m.SHA256))
	}
	return nil
}
