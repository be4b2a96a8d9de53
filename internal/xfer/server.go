package xfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// A Server answers transfer requests on a device: files
// received land in Dir, files asked for are read from Dir.
type Server struct {
	Dev *roce.Device
	Dir string
	// Options limit the staging buffer per connection (SlotSize, Slots) and
	// set the queue pair attributes; Progress is not used.
	Options *Options
	// Done, when set, is called after each transfer with its result (err
	// nil on success).
	Done func(op string, res Result, err error)
	// MaxConns bounds the transfers served at once (each holds a staging
	// buffer of Slots × SlotSize bytes); more are refused with "server
	// busy". 0 means DefaultMaxConns.
	MaxConns int
	// Overwrite lets a client that asks for it (send --force) replace a
	// file in Dir; otherwise a put of an existing name is refused.
	Overwrite bool

	root *os.Root // Dir, while Serve runs (store.go)
}

// DefaultMaxConns is Server.MaxConns when 0.
const DefaultMaxConns = 16

// Serve accepts control connections on ln until ctx ends or ln fails, and
// serves each in its own goroutine. It closes ln and waits for the
// connections' goroutines before returning. Dir is opened as an os.Root
// once: no request reaches outside it.
func (s *Server) Serve(ctx context.Context, ln *cm.Listener) error {
	o := s.Options.withDefaults()
	defer ln.Close()
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		return fmt.Errorf("served directory: %w", err)
	}
	s.root = root
	defer func() { root.Close(); s.root = nil }()
	var wg sync.WaitGroup
	defer wg.Wait()
	limit := s.MaxConns
	if limit <= 0 {
		limit = DefaultMaxConns
	}
	sem := make(chan struct{}, limit)
	for {
		conn, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			o.Log.Warn("control connection refused", "err", err)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			go func() {
				c := newCtrl(ctx, conn)
				refuse(c, fmt.Errorf("server busy: %d transfers running", limit))
				c.close()
			}()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			log := o.Log.With("peer", conn.RemoteAddr().String())
			if err := s.ServeConn(ctx, conn); err != nil {
				log.Warn("request failed", "err", err)
			}
		}()
	}
}

// ServeConn serves one control connection and closes it.
func (s *Server) ServeConn(ctx context.Context, conn *cm.Conn) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := newCtrl(ctx, conn)
	defer c.close()
	var req message
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	c.ctx = rctx
	err := c.recv(&req)
	rcancel()
	c.ctx = ctx
	if err != nil {
		return err
	}
	if req.Version != ProtocolVersion {
		err := fmt.Errorf("control protocol version %d, this server speaks %d", req.Version, ProtocolVersion)
		c.send(&message{Type: msgError, Error: err.Error()})
		return err
	}
	var (
		res Result
		op  = req.Type
	)
	switch req.Type {
	case msgPut:
		s.slotNotice(conn)
		res, err = s.servePut(ctx, cancel, c, &req, roce.RC)
	case msgPutLMRM:
		op = msgPut
		res, err = s.servePutLMRM(ctx, c, &req)
	case msgPutOOO:
		op = msgPut
		res, err = s.servePut(ctx, cancel, c, &req, roce.OOO)
	case msgPutEnlarge:
		op = msgPut
		res, err = s.servePutEnlarge(ctx, cancel, c, &req)
	case msgGet:
		s.slotNotice(conn)
		res, err = s.serveGet(ctx, cancel, c, &req, roce.RC)
	case msgGetLMRM:
		op = msgGet
		res, err = s.serveGetLMRM(ctx, cancel, c, &req)
	case msgGetOOO:
		op = msgGet
		res, err = s.serveGet(ctx, cancel, c, &req, roce.OOO)
	case msgGetEnlarge:
		op = msgGet
		res, err = s.serveGetEnlarge(ctx, cancel, c, &req)
	case msgCopySource:
		res, err = s.serveCopySource(c, &req)
	case msgCopySink:
		res, err = s.serveCopySink(c, &req)
	default:
		err = fmt.Errorf("unknown request %q", req.Type)
		c.send(&message{Type: msgError, Error: err.Error()})
	}
	if s.Done != nil {
		s.Done(op, res, err)
	}
	return err
}

// accept connects q to the client's queue pair in req, offers it contexts
// (OOO queue pairs) and sends acc with this side's queue pair; a failure to
// connect or to offer is sent to the client too.
func (q *qpConn) accept(c *ctrl, req, acc *message, res *Result, co *roce.ConnectOptions) error {
	if err := q.connect(req, co); err != nil {
		return refuse(c, err)
	}
	if q.qp.Type() == roce.RC {
		res.Reliability = q.rel.String() // what connect agreed with the request
		res.CC = q.cc.String()
	}
	if err := q.offerContexts(acc, res); err != nil {
		return refuse(c, err)
	}
	q.endpoint(acc)
	res.PathMTU = min(acc.PathMTU, req.PathMTU)
	return c.send(acc)
}

// refuse tells the client why the request fails and returns the error.
func refuse(c *ctrl, err error) error {
	c.send(errorMessage(err))
	return err
}

func (s *Server) limits(req *message) (slotSize, slots int) {
	o := s.Options.withDefaults()
	slotSize, slots = o.SlotSize, o.Slots
	if req.SlotSize > 0 && req.SlotSize < slotSize {
		slotSize = req.SlotSize
	}
	if req.Slots > 0 && req.Slots < slots {
		slots = req.Slots
	}
	return slotSize, slots
}

// servePut receives a file written into its staging buffer by RDMA WRITE
// (typ RC) or by the client's OOO WRITEs (typ OOO, put_ooo: ooo.go).
func (s *Server) servePut(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, req *message, typ roce.QPType) (res Result, err error) {
	o := s.Options.withDefaults()
	res = Result{Name: req.Name, Size: req.Size, Link: s.Dev.LinkName(), Peer: req.Link, Op: opName(typ, false)}
	tmp, cleanup, err := s.startReceive(c, req)
	if err != nil {
		return res, err
	}
	defer cleanup()
	slotSize, slots := s.limits(req)
	q, err := newQPConn(s.Dev, typ, slotSize, slots, roce.LocalWrite|roce.RemoteWrite, c.c.LocalAddr())
	if err != nil {
		return res, refuse(c, err)
	}
	defer q.close()
	acc := &message{Type: msgAccept, Addr: q.mr.Addr(), RKey: q.mr.RKey(), SlotSize: slotSize, Slots: slots}
	if err := q.offerCommit(acc); err != nil {
		return res, refuse(c, err)
	}
	if err := q.accept(c, req, acc, &res, o.Connect); err != nil {
		return res, err
	}
	start := time.Now()
	defer q.oooCounters(&res)
	recv, stop := q.commitRecv(ctx, c)
	defer stop()
	h := sha256.New()
	var next int64
	var held *message // a commit that came before the data messages ahead of it
	for {
		var m message
		if held != nil && held.Off == next {
			m, held = *held, nil
		} else if err := recv(&m); err != nil {
			return res, fmt.Errorf("receive %s after %d of %d bytes: %w", req.Name, next, req.Size, err)
		}
		switch m.Type {
		case msgError:
			return res, &RemoteError{Msg: m.Error}
		case msgData:
			if m.Slot < 0 || m.Slot >= slots || m.Len <= 0 || m.Len > slotSize || m.Off != next || next+int64(m.Len) > req.Size {
				return res, refuse(c, fmt.Errorf("bad data message (slot %d, %d bytes at %d)", m.Slot, m.Len, m.Off))
			}
			if err := appendSlot(tmp.File, h, q.slot(m.Slot)[:m.Len], m.Off); err != nil {
				return res, refuse(c, err)
			}
			next += int64(m.Len)
			if err := c.send(&message{Type: msgFree, Slot: m.Slot}); err != nil {
				return res, err
			}
		case msgCommit: // OOO: the end, written by the client's engine (ooo_commit.go)
			if m.Off > next && m.Off <= req.Size && held == nil {
				held = &m // the data messages before it are still on their way
				continue
			}
			fallthrough
		case msgEnd:
			return res, s.verdict(c, tmp, req, &m, h, next, start, &res)
		default:
			return res, refuse(c, fmt.Errorf("unexpected %q during the transfer", m.Type))
		}
	}
}

// verdict answers a put's end message m once next bytes (hashed in h) are
// in: the file is renamed into place and the client told ok when the sizes
// and the SHA-256 agree, else the client is told why not.
func (s *Server) verdict(c *ctrl, tmp *tempFile, req, m *message, h hash.Hash, next int64, start time.Time, res *Result) error {
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	if next != req.Size || m.Size != req.Size {
		return refuse(c, fmt.Errorf("end after %d of %d bytes", next, req.Size))
	}
	if m.SHA256 != res.SHA256 {
		return refuse(c, fmt.Errorf("checksum mismatch: received sha256 %s, client sent %s", res.SHA256, m.SHA256))
	}
	if err := tmp.commit(s.overwrite(req)); err != nil {
		return refuse(c, err)
	}
	res.finish(start)
	return c.send(&message{Type: msgOK, SHA256: res.SHA256})
}

// openGet opens the file a get request names (refusing the request when it
// cannot) and returns it with its size.
func (s *Server) openGet(c *ctrl, req *message) (*os.File, int64, error) {
	if err := ValidName(req.Name); err != nil {
		return nil, 0, refuse(c, err)
	}
	root, release, err := s.dirRoot()
	if err != nil {
		return nil, 0, refuse(c, err)
	}
	defer release()
	f, err := openServed(root, req.Name)
	if err != nil {
		return nil, 0, refuse(c, err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%q is not a regular file", req.Name)
	} else if err != nil {
		err = fmt.Errorf("stat %q: %w", req.Name, err)
	}
	var size int64
	if err == nil {
		size, err = applySpan(f, st.Size(), req)
	}
	if err != nil {
		f.Close()
		return nil, 0, refuse(c, err)
	}
	return f, size, nil
}

// serveGet sends a file through its staging buffer, read by the client by
// RDMA READ (typ RC) or by OOO READs (typ OOO, get_ooo: ooo.go).
func (s *Server) serveGet(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, req *message, typ roce.QPType) (res Result, err error) {
	o := s.Options.withDefaults()
	res = Result{Name: req.Name, Link: s.Dev.LinkName(), Peer: req.Link, Op: opName(typ, true)}
	f, size, err := s.openGet(c, req)
	if err != nil {
		return res, err
	}
	defer f.Close()
	res.Size = size
	slotSize, slots := s.limits(req)
	slotSize, slots = stagingSize(size, slotSize, slots)
	q, err := newQPConn(s.Dev, typ, slotSize, slots, roce.LocalWrite|roce.RemoteRead, c.c.LocalAddr())
	if err != nil {
		return res, refuse(c, err)
	}
	defer q.close()
	acc := &message{Type: msgAccept, Size: size, Addr: q.mr.Addr(), RKey: q.mr.RKey(), SlotSize: slotSize, Slots: slots, Span: req.Span}
	if err := q.accept(c, req, acc, &res, o.Connect); err != nil {
		return res, err
	}
	start := time.Now()
	defer q.oooCounters(&res)
	// The client's frees and its verdict (an error from it ends the writes
	// at once).
	free, final := watchFree(c, cancel, slots)
	h := sha256.New()
	var off int64
	for off < size {
		var sl int
		select {
		case sl = <-free:
		case <-ctx.Done():
			return res, fmt.Errorf("send %s after %d of %d bytes: %w", req.Name, off, size, context.Cause(ctx))
		}
		n := int(min(int64(slotSize), size-off))
		buf := q.slot(sl)[:n]
		if _, err := io.ReadFull(f, buf); err != nil {
			return res, refuse(c, fmt.Errorf("read %q at %d: %w", req.Name, off, err))
		}
		h.Write(buf)
		if err := c.send(&message{Type: msgData, Slot: sl, Off: off, Len: n}); err != nil {
			return res, err
		}
		off += int64(n)
	}
	return res, endGet(ctx, c, req.Name, size, h, nil, final, start, &res)
}

// endGet ends a get once the content (hashed in h) is sent: it sends the
// end message with the SHA-256, then (with drain) waits for the writes
// still on their way, then for the client's verdict. A client that has
// every byte says ok even when a write's acknowledgement went missing
// after that; without the verdict a failed write is the reason.
func endGet(ctx context.Context, c *ctrl, name string, size int64, h hash.Hash, drain func() error, final <-chan message, start time.Time, res *Result) error {
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	if err := c.send(&message{Type: msgEnd, Size: size, SHA256: res.SHA256}); err != nil {
		return err
	}
	var failed error
	if drain != nil {
		failed = drain()
	}
	select {
	case m := <-final:
		if m.Type == msgError {
			return remoteError(&m)
		}
	case <-ctx.Done():
		if failed != nil {
			return fmt.Errorf("send %s: %w", name, failed)
		}
		return fmt.Errorf("send %s: %w", name, context.Cause(ctx))
	}
	res.finish(start)
	return nil
}
