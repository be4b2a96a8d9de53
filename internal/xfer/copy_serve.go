package xfer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// Third-party copy (docs/ooo.md, Third party; copy.go is the controller):
// a controller C asks a source S for a file (copy_source) and a sink T to
// receive it (copy_sink), each on its own authenticated control
// connection. Each server makes an OOO queue pair connected to the queue
// pair C names in its request: that connection is the admission, as the
// engine acts only for the controller a queue pair is connected to. S
// registers the whole file, T a buffer of its size; both hand their rkey
// and contexts to C only. C then tells S which sink to admit (copy_sink_qp:
// T's GID and QPN, from T's accept), posts third-party READs, and T's
// completions come back to C. S's bytes go straight to T.
const (
	msgCopySource = "copy_source"  // C → S: offer NAME for a third-party copy to C's queue pair
	msgCopySink   = "copy_sink"    // C → T: receive NAME (Size bytes) by third-party WRITEs for C's queue pair
	msgCopySinkQP = "copy_sink_qp" // C → S: admit the sink T (GID, QPN) on the source's queue pair

	// OpOOO3P is Result.Op of a third-party copy.
	OpOOO3P = "OOO third-party READ"
)

// MaxCopySize bounds a third-party copy: the source registers the whole
// file and the sink a buffer of its size (and one operation's length is
// 32 bits).
const MaxCopySize = 1 << 30

// serveCopySource offers a file to a controller: the whole file in a
// registered buffer, an OOO queue pair connected to the controller's, and
// contexts; then it admits the sinks the controller names until the
// controller ends.
func (s *Server) serveCopySource(c *ctrl, req *message) (res Result, err error) {
	o := s.Options.withDefaults()
	res = Result{Name: req.Name, Link: s.Dev.LinkName(), Peer: req.Link, Op: OpOOO3P}
	f, size, err := s.openGet(c, req)
	if err != nil {
		return res, err
	}
	defer f.Close()
	res.Size = size
	if size > MaxCopySize {
		return res, refuse(c, fmt.Errorf("%q has %d bytes: a third-party copy moves at most %d", req.Name, size, MaxCopySize))
	}
	q, err := newQPConn(s.Dev, roce.OOO, int(max(size, 1)), 1, roce.LocalWrite|roce.RemoteRead, c.c.LocalAddr())
	if err != nil {
		return res, refuse(c, err)
	}
	defer q.close()
	if _, err := io.ReadFull(f, q.buf[:size]); err != nil {
		return res, refuse(c, fmt.Errorf("read %q: %w", req.Name, err))
	}
	sum := sha256.Sum256(q.buf[:size])
	res.SHA256 = hex.EncodeToString(sum[:])
	acc := &message{Type: msgAccept, Size: size, SHA256: res.SHA256, Addr: q.mr.Addr(), RKey: q.mr.RKey()}
	if err := q.accept(c, req, acc, &res, o.Connect); err != nil {
		return res, err
	}
	start := time.Now()
	defer q.oooCounters(&res)
	for {
		var m message
		if err := c.recv(&m); err != nil {
			return res, err
		}
		switch m.Type {
		case msgError:
			return res, &RemoteError{Msg: m.Error}
		case msgCopySinkQP:
			gid, err := netip.ParseAddr(m.GID)
			if err != nil {
				return res, refuse(c, fmt.Errorf("sink gid %q: %w", m.GID, err))
			}
			if err := q.qp.AdmitSink(gid, m.QPN); err != nil {
				return res, refuse(c, err)
			}
			if err := c.send(&message{Type: msgOK}); err != nil {
				return res, err
			}
		case msgEnd:
			res.finish(start)
			return res, c.send(&message{Type: msgOK, SHA256: res.SHA256})
		default:
			return res, refuse(c, fmt.Errorf("unexpected %q during a third-party copy", m.Type))
		}
	}
}

// serveCopySink receives a file by third-party WRITEs: a buffer of its size,
// an OOO queue pair connected to the controller's, contexts; at the
// controller's end it checks the SHA-256 the controller got from the
// source, then stores the file.
func (s *Server) serveCopySink(c *ctrl, req *message) (res Result, err error) {
	o := s.Options.withDefaults()
	res = Result{Name: req.Name, Size: req.Size, Link: s.Dev.LinkName(), Peer: req.Link, Op: OpOOO3P}
	if req.Size > MaxCopySize {
		return res, refuse(c, fmt.Errorf("%d bytes: a third-party copy moves at most %d", req.Size, MaxCopySize))
	}
	tmp, cleanup, err := s.startReceive(c, req)
	if err != nil {
		return res, err
	}
	defer cleanup()
	q, err := newQPConn(s.Dev, roce.OOO, int(max(req.Size, 1)), 1, roce.LocalWrite|roce.RemoteWrite, c.c.LocalAddr())
	if err != nil {
		return res, refuse(c, err)
	}
	defer q.close()
	acc := &message{Type: msgAccept, Addr: q.mr.Addr(), RKey: q.mr.RKey()}
	if err := q.accept(c, req, acc, &res, o.Connect); err != nil {
		return res, err
	}
	start := time.Now()
	defer q.oooCounters(&res)
	var m message
	if err := c.expect(&m, msgEnd); err != nil {
		return res, err
	}
	data := q.buf[:req.Size]
	sum := sha256.Sum256(data)
	res.SHA256 = hex.EncodeToString(sum[:])
	if m.Size != req.Size || m.SHA256 != res.SHA256 {
		return res, refuse(c, fmt.Errorf("checksum mismatch: %d bytes here with sha256 %s, the source's %d bytes have %s",
			req.Size, res.SHA256, m.Size, m.SHA256))
	}
	if _, err := tmp.File.Write(data); err != nil {
		return res, refuse(c, fmt.Errorf("write %q: %w", req.Name, err))
	}
	if err := tmp.commit(s.overwrite(req)); err != nil {
		return res, refuse(c, err)
	}
	res.finish(start)
	return res, c.send(&message{Type: msgOK, SHA256: res.SHA256})
}
