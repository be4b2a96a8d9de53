package tlsproxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
)

const mib = 1 << 20

// exchange moves n bytes each way at once between the endpoint's conn and a client conn
// and checks them.
func exchange(t *testing.T, srv *ktls.Conn, cli io.ReadWriter, n int) {
	t.Helper()
	up, down := pattern(n, 1), pattern(n, 2)
	errc := make(chan error, 2)
	go func() {
		_, err := srv.Write(down)
		errc <- err
	}()
	go func() {
		_, err := cli.Write(up)
		errc <- err
	}()
	gotUp := make([]byte, n)
	if _, err := io.ReadFull(srv, gotUp); err != nil {
		t.Fatalf("endpoint read: %v", err)
	}
	gotDown := make([]byte, n)
	if _, err := io.ReadFull(cli, gotDown); err != nil {
		t.Fatalf("client read: %v", err)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
		t.Fatal("data differs")
	}
}

func TestGoClientExchangesMiB(t *testing.T) {
	l := newLab(t)
	res := l.serve(l.sock)
	nc, err := net.Dial("tcp", l.tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc := &recConn{Conn: nc, hold: true}
	var clientLog keyLog
	tc := tls.Client(rc, &tls.Config{RootCAs: l.roots, ServerName: "xdproce", MinVersion: tls.VersionTLS13, KeyLogWriter: &clientLog})
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	// App data in the same TCP segment as the client's Finished.
	if _, err := tc.Write([]byte("early")); err != nil {
		t.Fatal(err)
	}
	if err := rc.flush(); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("endpoint: %v", r.err)
	}
	srv := r.c
	defer srv.Close()
	if r.c.Kernel() {
		t.Fatal("KernelOff gave the kernel layer")
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(srv, got); err != nil || string(got) != "early" {
		t.Fatalf("first data: %q, %v", got, err)
	}
	st := tc.ConnectionState()
	if srv.Suite() != st.CipherSuite {
		t.Fatalf("endpoint suite %s, client %s", ktls.SuiteName(srv.Suite()), tls.CipherSuiteName(st.CipherSuite))
	}

	// The parameters message: lengths of the suite, seq 0/0, and the keys the client's own
	// secrets give.
	p, err := ktls.UnmarshalParams(l.params())
	if err != nil {
		t.Fatal(err)
	}
	kl := ktls.KeyLen(st.CipherSuite)
	if p.Version != ktls.VersionTLS13 || len(p.Rx.Key) != kl || len(p.Tx.Key) != kl || len(p.Rx.IV) != 12 || len(p.Tx.IV) != 12 || p.Rx.Seq != 0 || p.Tx.Seq != 0 {
		t.Fatalf("params: version %x, keys %d/%d bytes, IVs %d/%d, seq %d/%d", p.Version, len(p.Rx.Key), len(p.Tx.Key), len(p.Rx.IV), len(p.Tx.IV), p.Rx.Seq, p.Tx.Seq)
	}
	cs, _ := clientLog.secret(labelClientTraffic)
	want, err := trafficKeys(st.CipherSuite, cs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want.Key, p.Rx.Key) || !bytes.Equal(want.IV, p.Rx.IV) {
		t.Fatal("the endpoint's receive key is not the one the client's CLIENT_TRAFFIC_SECRET_0 gives")
	}

	exchange(t, srv, tc, mib)

	// close_notify from the endpoint ends the client's reading cleanly.
	srv.Close()
	if n, err := tc.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read after the endpoint's Close: %d, %v; want io.EOF", n, err)
	}
}

// Failed handshakes: the endpoint returns an error and sends the peer only what the proxy
// gave it (the handshake flight and alerts), never application data.
func TestFailedHandshakesSendNoData(t *testing.T) {
	l := newLab(t)
	t.Run("wrong-cert", func(t *testing.T) {
		l.reset()
		res := l.serve(l.sock)
		nc, err := net.Dial("tcp", l.tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		rc := &recConn{Conn: nc}
		tc := tls.Client(rc, &tls.Config{ServerName: "xdproce", MinVersion: tls.VersionTLS13}) // system roots: no trust
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Fatal("client accepted an untrusted certificate")
		}
		tc.Close()
		r := <-res
		if r.err == nil {
			r.c.Close()
			t.Fatal("endpoint returned a connection")
		}
		checkOnlyProxyBytes(t, l, rc)
	})
	t.Run("garbage-hello", func(t *testing.T) {
		l.reset()
		res := l.serve(l.sock)
		nc, err := net.Dial("tcp", l.tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		rc := &recConn{Conn: nc}
		rc.SetDeadline(time.Now().Add(10 * time.Second))
		rc.Write(append([]byte{22, 3, 1, 0, 40}, bytes.Repeat([]byte{0xa5}, 40)...))
		r := <-res
		if r.err == nil {
			r.c.Close()
			t.Fatal("endpoint returned a connection")
		}
		io.Copy(io.Discard, rc)
		checkOnlyProxyBytes(t, l, rc)
		if got := rc.received(); len(got) < 7 || got[0] != 21 {
			t.Fatalf("client got % x, want an alert", got)
		}
	})
	t.Run("dead-proxy", func(t *testing.T) {
		res := l.serve(filepath.Join(t.TempDir(), "nobody.sock"))
		onlyInternalError(t, l, res)
	})
	t.Run("proxy-dies-midway", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "dying.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			ktls.ReadFrame(c) // hello
			ktls.WriteFrame(c, ktls.FrameNeed, nil)
			ktls.ReadFrame(c) // the ClientHello; then it dies
		}()
		res := l.serve(sock)
		onlyInternalError(t, l, res)
	})
	t.Run("plain", func(t *testing.T) {
		res := l.serve(l.sock)
		nc, err := net.Dial("tcp", l.tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write([]byte{0, 0, 0, 2, '{', '}'})
		r := <-res
		var ne *ktls.NotTLSError
		if !errors.As(r.err, &ne) {
			t.Fatalf("endpoint: %v, want NotTLSError", r.err)
		}
		b := make([]byte, 6)
		if _, err := io.ReadFull(ne.Conn, b); err != nil || !bytes.Equal(b, []byte{0, 0, 0, 2, '{', '}'}) {
			t.Fatalf("replayed %q, %v", b, err)
		}
		ne.Conn.Close()
	})
}

// onlyInternalError: a stock client's handshake with an endpoint whose proxy is gone fails,
// the endpoint returns no connection, and the client receives one internal_error alert and
// nothing else.
func onlyInternalError(t *testing.T, l *lab, res <-chan serverResult) {
	t.Helper()
	nc, err := net.Dial("tcp", l.tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc := &recConn{Conn: nc}
	tc := tls.Client(rc, &tls.Config{RootCAs: l.roots, ServerName: "xdproce", MinVersion: tls.VersionTLS13})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake without a working proxy succeeded")
	}
	r := <-res
	if r.err == nil {
		r.c.Close()
		t.Fatal("endpoint returned a connection")
	}
	io.Copy(io.Discard, rc)
	if got := rc.received(); !bytes.Equal(got, []byte{21, 3, 3, 0, 2, 2, 80}) {
		t.Fatalf("client got % x, want only an internal_error alert", got)
	}
}

// checkOnlyProxyBytes: once the endpoint has closed, the client received only bytes the proxy
// produced for this connection, in order (a prefix: what the proxy sent after the client hung
// up does not arrive).
func checkOnlyProxyBytes(t *testing.T, l *lab, rc *recConn) {
	t.Helper()
	rc.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, rc)
	got := rc.received()
	all := l.proxyData()
	if len(got) == 0 || !bytes.HasPrefix(all, got) {
		t.Fatalf("client received %d bytes that are not a prefix of the proxy's %d", len(got), len(all))
	}
}

func TestRefusesClientWithoutAESGCM(t *testing.T) {
	for _, tc := range []struct {
		suites []uint16
		want   string
	}{
		{[]uint16{tlsChaCha20Poly1305}, "no AES-GCM suite"},
		{[]uint16{tlsChaCha20Poly1305, ktls.TLS_AES_128_GCM_SHA256}, "prefers TLS_CHACHA20_POLY1305_SHA256"},
	} {
		_, err := checkSuites(&tls.ClientHelloInfo{CipherSuites: tc.suites})
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("suites %x: %v, want %q", tc.suites, err, tc.want)
		}
	}
	if _, err := checkSuites(&tls.ClientHelloInfo{CipherSuites: []uint16{ktls.TLS_AES_256_GCM_SHA384, tlsChaCha20Poly1305}}); err != nil {
		t.Errorf("AES first: %v", err)
	}
}

func TestListenReplacesStaleSocketOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil {
		t.Fatal("a second Listen on a live socket succeeded")
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	ln, err = Listen(path)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	ln.Close()
}
