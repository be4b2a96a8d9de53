package capture

import (
	"errors"
	"strconv"
	"time"

	"github.com/xdproce/xdproce/link"
)

// Wrap returns a Link that behaves as l and records every frame it sends
// (outbound) and receives (inbound) into w, on a new interface named after
// l.Props().Name. See WrapInterface.
func Wrap(l link.Link, w *Writer) link.Link {
	p := l.Props()
	return WrapInterface(l, w, Interface{
		Name:        p.Name,
		Description: "xdproce link " + p.Name + ", MTU " + strconv.Itoa(p.MTU),
	})
}

// WrapInterface is Wrap with the interface's name and description given (for
// example the network interface's name, "veth0").
//
// Frames are recorded as they pass: received frames after the inner Receive
// returns them, sent frames just before the inner Send takes them (so a frame
// the link then fails to send is still recorded). All frames of one batch get
// the same timestamp. Recording does not allocate.
//
// Write errors do not disturb the link: they are sticky in w, and Close (or
// w.Flush, or w.Err) reports them. Close closes l, then flushes w; it does not
// close w's underlying file.
//
// Concurrency is that of link.Link: one goroutine (the engine) calls Receive,
// Alloc, Send, Free and Wait; Wake and Close may come from any goroutine. The
// Writer is safe for concurrent use, so several wrapped links may share it.
func WrapInterface(l link.Link, w *Writer, ifc Interface) link.Link {
	id, err := w.AddInterface(ifc)
	if err != nil {
		// Make the failure sticky so that Close and Flush report it; every
		// recorded frame then fails with it too.
		w.fail(err)
		id = -1
	}
	return &recorder{Link: l, w: w, iface: id}
}

type recorder struct {
	link.Link
	w     *Writer
	iface int
}

var _ link.Link = (*recorder)(nil)

func (c *recorder) Receive(frames [][]byte) (int, error) {
	n, err := c.Link.Receive(frames)
	if n > 0 {
		c.w.writeBatch(c.iface, time.Now().UnixNano(), DirInbound, frames[:n])
	}
	return n, err
}

func (c *recorder) Send(frames [][]byte) error {
	if len(frames) > 0 {
		c.w.writeBatch(c.iface, time.Now().UnixNano(), DirOutbound, frames)
	}
	return c.Link.Send(frames)
}

// ICRCChecked is the wrapped link's (see link.ICRCChecker): recording
// leaves the frames as they are.
func (c *recorder) ICRCChecked(i int) bool { return link.ICRCChecked(c.Link, i) }

// Nap is the wrapped link's (see link.Napper).
func (c *recorder) Nap(timeout time.Duration) error { return link.Nap(c.Link, timeout) }

func (c *recorder) Close() error {
	err := c.Link.Close()
	ferr := c.w.Flush()
	return errors.Join(err, ferr)
}
