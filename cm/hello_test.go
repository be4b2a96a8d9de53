package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
)

// v1Hello is the hello of xdproce before the capability exchange, byte for byte.
const v1Hello = `{"type":"hello","proto":"xdproce-cm","version":1}`

func rawFrame(s string) []byte {
	return append([]byte{0, 0, byte(len(s) >> 8), byte(len(s))}, s...)
}

// TestHelloVersion1Peers: a peer that speaks the version 1 hello (before capabilities and
// authentication) is refused with one line that says which side to upgrade, on both sides,
// and never with a protocol error.
func TestHelloVersion1Peers(t *testing.T) {
	// A version 1 client against this server: it gets one error frame, and the text a v1
	// client turns into ErrVersionMismatch.
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() { _, err := l.Accept(context.Background()); accepted <- err }()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(rawFrame(v1Hello))
	m, err := newConn(nc, 0).Recv(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != TypeError || !strings.Contains(m.Error, "protocol version mismatch") || !strings.Contains(m.Error, "upgrade the client") ||
		strings.Contains(m.Error, "\n") {
		t.Errorf("answer to a version 1 hello: %+v", m)
	}
	if err := <-accepted; !errors.Is(err, ErrVersionMismatch) || errors.Is(err, ErrProtocol) {
		t.Errorf("server side: %v", err)
	}

	// This client against a version 1 server, which answers a hello it does not speak with
	// the error frame version 1 sent.
	v1Refusal := `{"type":"error","error":"hello: protocol version mismatch: this side speaks version 1, the client 2"}`
	addr := fakeServer(t, rawFrame(v1Refusal))
	_, err = Dial(context.Background(), addr, &Config{Retry: -1})
	if !errors.Is(err, ErrVersionMismatch) || errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "upgrade the server") {
		t.Errorf("version 1 server: %v", err)
	}
	// A version 1 server that answered with its hello (had it accepted ours).
	addr = fakeServer(t, rawFrame(v1Hello))
	_, err = Dial(context.Background(), addr, &Config{Retry: -1})
	if !errors.Is(err, ErrVersionMismatch) || !strings.Contains(err.Error(), "upgrade the server") {
		t.Errorf("version 1 hello from the server: %v", err)
	}
	// A later version is not refused for its number: capabilities say what it can do.
	addr = fakeServer(t, frameOf(t, Message{Type: TypeHello, Proto: ProtocolName, Version: ProtocolVersion + 1, Caps: []string{CapOverwrite, "later"}, Auth: AuthNone}))
	c, err := Dial(context.Background(), addr, &Config{Retry: -1})
	if err != nil {
		t.Fatalf("version %d server: %v", ProtocolVersion+1, err)
	}
	if !c.PeerHas("later") || c.PeerHas(CapPSK) {
		t.Errorf("peer capabilities %v", c.PeerCaps())
	}
	c.Close()
}

// TestHelloCapabilities: a capability one side requires and the other lacks fails the hello
// with one line naming it, on both sides.
func TestHelloCapabilities(t *testing.T) {
	addr := fakeServer(t, frameOf(t, Message{Type: TypeHello, Proto: ProtocolName, Version: ProtocolVersion, Caps: []string{CapPSK}, Auth: AuthNone}))
	_, err := Dial(context.Background(), addr, &Config{Retry: -1, Require: []string{CapOverwrite}})
	if !errors.Is(err, ErrCapability) || !strings.Contains(err.Error(), `the server lacks "overwrite"`) {
		t.Errorf("server without overwrite: %v", err)
	}
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true, Require: []string{"selective-repeat"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() { _, err := l.Accept(context.Background()); accepted <- err }()
	_, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: -1})
	if !errors.Is(err, ErrCapability) || !strings.Contains(err.Error(), `the client lacks "selective-repeat"`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("client without the server's capability: %v", err)
	}
	if err := <-accepted; !errors.Is(err, ErrCapability) {
		t.Errorf("server side: %v", err)
	}
}

func TestListenNeedsAuthentication(t *testing.T) {
	if _, err := Listen("127.0.0.1:0", nil); !errors.Is(err, ErrNoAuth) {
		t.Errorf("Listen without authentication: %v", err)
	}
	if _, err := Listen("127.0.0.1:0", &Config{PSK: []byte("short")}); err == nil {
		t.Error("a 5-byte key accepted")
	}
}

// proxy is a TCP proxy to target that keeps every byte either way.
func proxy(t *testing.T, target string) (string, *testenv.Buffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rec := &testenv.Buffer{}
	go func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				a.Close()
				return
			}
			go func() { io.Copy(io.MultiWriter(b, rec), a); b.Close() }()
			go func() { io.Copy(io.MultiWriter(a, rec), b); a.Close() }()
		}
	}()
	return ln.Addr().String(), rec
}

// TestPSK: the right key on both ends connects, and the key is nowhere on the wire; a wrong
// key, no key, or a key against a server without one are refused with one line, on both
// sides; a client that skips the proof gets no answer to its request.
func TestPSK(t *testing.T) {
	key := []byte("correct horse battery staple 42")
	l, err := Listen("127.0.0.1:0", &Config{PSK: key})
	if err != nil {
		t.Fatal(err)
	}
	errc := serveEcho(t, l)
	addr, rec := proxy(t, l.Addr().String())
	c, err := Dial(context.Background(), addr, &Config{Retry: -1, PSK: key})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Call(context.Background(), &Message{Op: "x", Name: "n"}, nil); err != nil || r.Name != "echo:n" {
		t.Fatalf("call after authentication: %+v %v", r, err)
	}
	c.Close()
	if w := rec.Bytes(); bytes.Contains(w, key) || !bytes.Contains(w, []byte(`"auth":"psk"`)) || len(w) < 200 {
		t.Errorf("the wire (%d bytes) holds the key or no psk exchange: %q", len(w), w)
	}

	for _, tc := range []struct {
		name       string
		cfg        Config
		client     string
		server     string
		serverSees bool
	}{
		{"wrong key", Config{PSK: []byte("correct horse battery staple 43")}, "the server's proof of the pre-shared key is wrong", "", false},
		{"no key", Config{}, "the server requires a pre-shared key (--psk-file FILE)", "", false},
	} {
		tc.cfg.Retry = -1
		_, err := Dial(context.Background(), l.Addr().String(), &tc.cfg)
		if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), tc.client) {
			t.Errorf("%s: %v", tc.name, err)
		}
		select {
		case err := <-errc:
			if err == nil {
				t.Errorf("%s: server accepted", tc.name)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: the server did not drop the client", tc.name)
		}
	}
	// A client that answers the challenge wrongly: the server names the reason.
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	raw := newConn(nc, 0)
	n := newNonce()
	raw.Send(context.Background(), &Message{Type: TypeHello, Proto: ProtocolName, Version: ProtocolVersion, Caps: Capabilities, Nonce: n.String()})
	if m, err := raw.Recv(context.Background()); err != nil || m.Auth != AuthPSK || m.Nonce == "" || m.MAC == "" {
		t.Fatalf("server hello %+v %v", m, err)
	}
	// Skip the proof and ask straight away: refused, the request never reaches the handler.
	raw.Send(context.Background(), &Message{Type: TypeRequest, ID: 1, Op: "put", Name: "f"})
	m, err := raw.Recv(context.Background())
	if err != nil || m.Type != TypeError || !strings.Contains(m.Error, "authentication failed") {
		t.Errorf("request before the proof: %+v %v", m, err)
	}
	if _, err := raw.Recv(context.Background()); err != io.EOF {
		t.Errorf("after the refusal: %v, want the connection closed", err)
	}
	if err := <-errc; !errors.Is(err, ErrAuth) {
		t.Errorf("server side of a skipped proof: %v", err)
	}

	// A client with a key against a server without one.
	open, err := Listen("127.0.0.1:0", &Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, open)
	_, err = Dial(context.Background(), open.Addr().String(), &Config{Retry: -1, PSK: key})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "does not use a pre-shared key") {
		t.Errorf("key against an open server: %v", err)
	}

	// Key files.
	dir := t.TempDir()
	kf := filepath.Join(dir, "key")
	k, err := WritePSK(kf)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := LoadPSK(kf); err != nil || !bytes.Equal(got, k) {
		t.Errorf("LoadPSK of WritePSK's key: %q %v", got, err)
	}
	if st, _ := os.Stat(kf); st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", st.Mode())
	}
	os.WriteFile(kf, []byte("short\n"), 0o600)
	if _, err := LoadPSK(kf); err == nil || !strings.Contains(err.Error(), "want at least 16") {
		t.Errorf("short key: %v", err)
	}
}

// TestMutualTLS: a server with a client CA takes clients with a certificate it signed and
// refuses the others with a line that says what is missing.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := testenv.ClientCA(t, dir)
	l, err := Listen("127.0.0.1:0", &Config{TLS: &TLSConfig{ClientCAFile: caFile}})
	if err != nil {
		t.Fatal(err)
	}
	errc := serveEcho(t, l)
	fp := l.Fingerprint()
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{Fingerprint: fp, CertFile: certFile, KeyFile: keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), &Message{Op: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{Fingerprint: fp}})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "requires a client certificate") {
		t.Errorf("no client certificate: %v", err)
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("server side: %v", err)
	}
	// A certificate from another CA (the server's own self-signed one).
	other, otherKey := filepath.Join(dir, "o.pem"), filepath.Join(dir, "o.key")
	WriteSelfSigned("intruder", other, otherKey)
	_, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{Fingerprint: fp, CertFile: other, KeyFile: otherKey}})
	if !errors.Is(err, ErrAuth) {
		t.Errorf("foreign client certificate: %v", err)
	}
}

// TestTLSDir: a certificate kept in TLSConfig.Dir gives the same fingerprint at every Listen.
func TestTLSDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf", "xdproce")
	var fps []string
	for i := range 2 {
		l, err := Listen("127.0.0.1:0", &Config{Insecure: true, TLS: &TLSConfig{Dir: dir}})
		if err != nil {
			t.Fatal(err)
		}
		if l.Generated() != (i == 0) {
			t.Errorf("listen %d: generated %v", i, l.Generated())
		}
		fps = append(fps, l.Fingerprint())
		l.Close()
	}
	if fps[0] != fps[1] || len(fps[0]) != 64 {
		t.Errorf("fingerprints across restarts: %v", fps)
	}
	if st, err := os.Stat(filepath.Join(dir, DirKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kept key: %v %v", st, err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir: %v %v", st, err)
	}
}

// TestAcceptNotHeldUp: a client that connects and says nothing does not keep the next client
// from being accepted; it is dropped after the timeout.
func TestAcceptNotHeldUp(t *testing.T) {
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	idle, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(50 * time.Millisecond)
	got := make(chan error, 2)
	go func() {
		for range 2 {
			c, err := l.Accept(context.Background())
			if c != nil {
				c.Close()
			}
			got <- err
		}
	}()
	t0 := time.Now()
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-got; err != nil || time.Since(t0) > time.Second {
		t.Errorf("second client accepted after %v: %v", time.Since(t0), err)
	}
	if err := <-got; err == nil || time.Since(t0) > 5*time.Second {
		t.Errorf("idle client: %v after %v, want a hello timeout", err, time.Since(t0))
	}
}

// TestPSKBindsCapabilities: a man in the middle who removes a capability from the client's
// hello (to turn a feature off) makes the proofs fail: the client refuses the server.
func TestPSKBindsCapabilities(t *testing.T) {
	key := []byte("correct horse battery staple 42")
	l, err := Listen("127.0.0.1:0", &Config{PSK: key})
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		a, err := ln.Accept()
		if err != nil {
			return
		}
		defer a.Close()
		b, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return
		}
		defer b.Close()
		ca, cb := newConn(a, 0), newConn(b, 0)
		m, err := ca.Recv(context.Background())
		if err != nil {
			return
		}
		m.Caps = []string{CapPSK} // CapOverwrite stripped
		cb.Send(context.Background(), m)
		go io.Copy(b, a)
		io.Copy(a, b)
	}()
	_, err = Dial(context.Background(), ln.Addr().String(), &Config{Retry: -1, PSK: key})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "changed on the way") {
		t.Errorf("hello changed on the way: %v", err)
	}
}
