package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

// A Gateway is the HTTP handler of `xdproce gateway` (see the package doc).
type Gateway struct {
	// Dev is the device the gateway's queue pairs run on.
	Dev *roce.Device
	// Node is the serve node's control address, host[:port].
	Node string
	// Ctrl configures the control connections to the node: authentication
	// (PSK, TLS), retries, and in tests the dialer. Require is extended per
	// request (cm.CapRange for a Range GET, cm.CapOverwrite for a PUT that
	// replaces).
	Ctrl *cm.Config
	// Options tune the transfers (staging slots, queue pair attributes).
	// Force and Progress are set per request; OOO and Enlarge are not taken.
	Options *xfer.Options
	// MaxConns bounds the requests served at once (each holds a staging
	// buffer); more get 503. 0 means DefaultMaxConns.
	MaxConns int
	// Report, when set, is called once per request with one line that says
	// what happened (method, name, status, bytes, time).
	Report func(line string)

	once sync.Once
	sem  chan struct{}
}

// DefaultMaxConns is Gateway.MaxConns when 0.
const DefaultMaxConns = 8

// ServeHTTP serves PUT /NAME and GET /NAME.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.once.Do(func() {
		n := g.MaxConns
		if n <= 0 {
			n = DefaultMaxConns
		}
		g.sem = make(chan struct{}, n)
	})
	start := time.Now()
	name := strings.TrimPrefix(r.URL.Path, "/")
	var (
		status int
		n      int64
		rep    *reply
	)
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodPut:
		w.Header().Set("Allow", "GET, PUT")
		rep = replyf(http.StatusMethodNotAllowed, "method %s: the gateway serves GET and PUT", r.Method)
	case xfer.ValidName(name) != nil:
		rep = replyf(http.StatusBadRequest, "%v", xfer.ValidName(name))
	default:
		select {
		case g.sem <- struct{}{}:
			status, n, rep = g.transfer(w, r, name)
		default:
			rep = replyf(http.StatusServiceUnavailable, "gateway busy: %d requests running", cap(g.sem))
		}
	}
	what := ""
	if rep != nil {
		rep.write(w)
		status, what = rep.status, ": "+rep.msg
	}
	if g.Report != nil {
		g.Report(fmt.Sprintf("%s /%s %d %d bytes in %v%s", r.Method, name, status, n, time.Since(start).Round(time.Millisecond), what))
	}
}

// transfer runs a PUT or GET holding a place of MaxConns (given back also
// when get aborts the response).
func (g *Gateway) transfer(w http.ResponseWriter, r *http.Request, name string) (int, int64, *reply) {
	defer func() { <-g.sem }()
	if r.Method == http.MethodPut {
		return g.put(w, r, name)
	}
	return g.get(w, r, name)
}

// dial opens a control connection to the node that requires caps.
func (g *Gateway) dial(ctx context.Context, caps ...string) (*cm.Conn, *reply) {
	var cfg cm.Config
	if g.Ctrl != nil {
		cfg = *g.Ctrl
	}
	cfg.Require = append(slices.Clip(cfg.Require), caps...)
	conn, err := cm.Dial(ctx, g.Node, &cfg)
	if err != nil {
		return nil, dialReply(g.Node, err)
	}
	return conn, nil
}

func (g *Gateway) options() xfer.Options {
	var o xfer.Options
	if g.Options != nil {
		o = *g.Options
	}
	o.Progress, o.OOO, o.Enlarge = nil, nil, nil
	return o
}

// put stores the request's body on the node as name.
func (g *Gateway) put(w http.ResponseWriter, r *http.Request, name string) (int, int64, *reply) {
	if r.ContentLength < 0 {
		return 0, 0, replyf(http.StatusLengthRequired, "PUT needs a Content-Length (a body sent chunked is not taken)")
	}
	o := g.options()
	var caps []string
	if o.Force = r.URL.Query().Get("overwrite") == "1"; o.Force {
		caps = append(caps, cm.CapOverwrite)
	}
	conn, rep := g.dial(r.Context(), caps...)
	if rep != nil {
		return 0, 0, rep
	}
	body := &bodyReader{r: r.Body}
	res, err := xfer.Send(r.Context(), g.Dev, conn, body, r.ContentLength, name, &o)
	if err != nil {
		if body.err != nil {
			return 0, body.n, replyf(http.StatusBadRequest, "request body after %d of %d bytes: %v", body.n, r.ContentLength, body.err)
		}
		return 0, body.n, transferReply(err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "stored %s: %d bytes, sha256 %s\n", name, res.Size, res.SHA256)
	return http.StatusCreated, res.Size, nil
}

// bodyReader remembers how much of a request's body was read and its
// error, to tell a client's failure from the node's.
type bodyReader struct {
	r   io.Reader
	n   int64
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// get sends name (or the range the request asks for) from the node.
func (g *Gateway) get(w http.ResponseWriter, r *http.Request, name string) (int, int64, *reply) {
	var sp *xfer.Span
	var caps []string
	if h := r.Header.Get("Range"); h != "" {
		var unsatisfiable bool
		if sp, unsatisfiable = parseRange(h); unsatisfiable {
			return 0, 0, replyf(http.StatusRequestedRangeNotSatisfiable, "range %q asks for no bytes", h)
		}
		if sp != nil {
			caps = append(caps, cm.CapRange)
		}
	}
	conn, rep := g.dial(r.Context(), caps...)
	if rep != nil {
		return 0, 0, rep
	}
	status := 0
	out := &countingWriter{w: w}
	start := func(got xfer.Span) (io.Writer, error) {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Accept-Ranges", "bytes")
		h.Set("Content-Length", strconv.FormatInt(got.Count, 10))
		status = http.StatusOK
		// A range of an empty file is empty: there is no Content-Range
		// for it, so the (empty) file goes as a whole.
		if sp != nil && got.Count > 0 {
			h.Set("Content-Range", contentRange(got))
			status = http.StatusPartialContent
		}
		w.WriteHeader(status)
		return out, nil
	}
	o := g.options()
	_, err := xfer.GetStream(r.Context(), g.Dev, conn, name, sp, start, &o)
	if err == nil {
		return status, out.n, nil
	}
	if status == 0 {
		return 0, 0, transferReply(err)
	}
	// The response has begun: cut it short, so that the client sees a body
	// shorter than its Content-Length rather than a complete one.
	if g.Report != nil {
		g.Report(fmt.Sprintf("%s /%s %d cut short after %d bytes: %v", r.Method, name, status, out.n, err))
	}
	panic(http.ErrAbortHandler)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil {
		err = fmt.Errorf("http client: %w", err)
	}
	return n, err
}
