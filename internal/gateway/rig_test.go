package gateway

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
)

var testPSK = []byte("gateway-test-key-0123456789abcdef")

// rig is a serve node (xfer.Server on one loopback device, PSK) and a
// gateway on the other, behind an httptest server; every control
// connection the gateway makes goes through rec.
type rig struct {
	dir string
	url string
	// stopNode stops the node's server (its transfers end at once).
	stopNode func()
	gw       *Gateway
	rec      *recorder
	node     string
}

func newRig(t *testing.T, opts *xfer.Options) *rig {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector cannot see ordering through kernel sockets (see race_on_test.go)")
	}
	a, b, err := xfer.LoopbackPair(20000+(os.Getpid()+7)%20000, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	r := &rig{dir: t.TempDir(), rec: &recorder{}}
	ln, err := cm.Listen("127.0.0.2:0", &cm.Config{PSK: testPSK})
	if err != nil {
		t.Fatal(err)
	}
	r.node = ln.Addr().String()
	srv := &xfer.Server{Dev: b, Dir: r.dir, Options: opts, Overwrite: true}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	var once sync.Once
	r.stopNode = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(r.stopNode)
	r.gw = &Gateway{Dev: a, Node: r.node, Options: opts,
		Ctrl:   &cm.Config{PSK: testPSK, Retry: time.Second, DialContext: r.rec.dial},
		Report: func(line string) { t.Log(line) }}
	hs := httptest.NewServer(r.gw)
	t.Cleanup(hs.Close)
	r.url = hs.URL
	return r
}

// do runs one request and returns its status, headers and body.
func (r *rig) do(t *testing.T, method, path string, body []byte, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, r.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, got
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	rng.Read(b)
	return b
}

// recorder wraps the control connections: it keeps every byte each one
// carried, both ways.
type recorder struct {
	mu    sync.Mutex
	conns []*recConn
}

func (rc *recorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := new(net.Dialer).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	w := &recConn{Conn: c}
	rc.mu.Lock()
	rc.conns = append(rc.conns, w)
	rc.mu.Unlock()
	return w, nil
}

// take returns the connections recorded since the last take.
func (rc *recorder) take() []*recConn {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	c := rc.conns
	rc.conns = nil
	return c
}

type recConn struct {
	net.Conn
	mu       sync.Mutex
	sent     bytes.Buffer
	received bytes.Buffer
}

func (c *recConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.received.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.sent.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// bytes returns what the connection carried, both ways.
func (c *recConn) bytes() (sent, received []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.sent.Bytes()), bytes.Clone(c.received.Bytes())
}

// copyBody copies a response's body to w and closes it.
func copyBody(w io.Writer, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(w, resp.Body)
}
