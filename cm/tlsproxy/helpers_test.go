package tlsproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cm/ktls"
)

// lab is a proxy on a unix socket with a tap between it and the endpoints, and a TCP
// listener whose connections the endpoint (ktls.Server) takes.
type lab struct {
	t      *testing.T
	cert   tls.Certificate
	roots  *x509.CertPool
	sock   string // the tap's socket: what endpoints dial
	tcp    net.Listener
	mu     sync.Mutex
	frames []frame // what the proxy sent through the tap, in order
}

type frame struct {
	typ     byte
	payload []byte
}

func newLab(t *testing.T) *lab {
	t.Helper()
	cert, err := cm.SelfSigned("xdproce")
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	dir := t.TempDir()
	l := &lab{t: t, cert: cert, roots: roots, sock: filepath.Join(dir, "tap.sock")}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pln, err := Listen(filepath.Join(dir, "proxy.sock"))
	if err != nil {
		t.Fatal(err)
	}
	p := New(&cert, 5*time.Second, nil)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, pln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy Serve: %v", err)
		}
	})
	tln, err := net.Listen("unix", l.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tln.Close() })
	go l.tap(tln, filepath.Join(dir, "proxy.sock"))
	l.tcp, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.tcp.Close() })
	return l
}

// tap relays endpoint ↔ proxy frames and records the proxy's.
func (l *lab) tap(ln net.Listener, proxy string) {
	for {
		ec, err := ln.Accept()
		if err != nil {
			return
		}
		pc, err := net.Dial("unix", proxy)
		if err != nil {
			ec.Close()
			continue
		}
		go func() {
			io.Copy(pc, ec)
			pc.Close()
		}()
		go func() {
			defer ec.Close()
			for {
				typ, payload, err := ktls.ReadFrame(pc)
				if err != nil {
					return
				}
				l.mu.Lock()
				l.frames = append(l.frames, frame{typ, payload})
				l.mu.Unlock()
				if ktls.WriteFrame(ec, typ, payload) != nil {
					return
				}
			}
		}()
	}
}

// proxyData is what the proxy gave the endpoint to send to the peer.
func (l *lab) proxyData() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b []byte
	for _, f := range l.frames {
		if f.typ == ktls.FrameData {
			b = append(b, f.payload...)
		}
	}
	return b
}

func (l *lab) reset() {
	l.mu.Lock()
	l.frames = nil
	l.mu.Unlock()
}

func (l *lab) params() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.frames {
		if f.typ == ktls.FrameParams {
			return f.payload
		}
	}
	return nil
}

type serverResult struct {
	c   *ktls.Conn
	err error
}

// serve accepts one TCP connection and runs ktls.Server on it with the user-space layer.
func (l *lab) serve(proxy string) <-chan serverResult { return l.serveMode(proxy, ktls.KernelOff) }

func (l *lab) serveMode(proxy string, mode ktls.KernelMode) <-chan serverResult {
	ch := make(chan serverResult, 1)
	go func() {
		nc, err := l.tcp.Accept()
		if err != nil {
			ch <- serverResult{err: err}
			return
		}
		c, err := ktls.Server(context.Background(), nc, &ktls.Config{Proxy: proxy, Timeout: 5 * time.Second, Kernel: mode})
		ch <- serverResult{c, err}
	}()
	return ch
}

// recConn records what a client receives, and with hold keeps its writes after its first
// read in one buffer until flush (to put app data in the flight of the client's Finished).
type recConn struct {
	net.Conn
	mu      sync.Mutex
	got     bytes.Buffer
	hold    bool
	read    bool
	pending []byte
}

func (r *recConn) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.mu.Lock()
	r.got.Write(b[:n])
	r.read = true
	r.mu.Unlock()
	return n, err
}

func (r *recConn) Write(b []byte) (int, error) {
	r.mu.Lock()
	if r.hold && r.read {
		r.pending = append(r.pending, b...)
		r.mu.Unlock()
		return len(b), nil
	}
	r.mu.Unlock()
	return r.Conn.Write(b)
}

func (r *recConn) flush() error {
	r.mu.Lock()
	p := r.pending
	r.hold, r.pending = false, nil
	r.mu.Unlock()
	_, err := r.Conn.Write(p)
	return err
}

func (r *recConn) received() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.got.Bytes())
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>11)
	}
	return b
}
