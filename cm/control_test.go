package cm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serveEcho accepts connections on l and answers every request: op "fail" with an error,
// anything else with two progress events and a reply echoing the request's fields.
func serveEcho(t *testing.T, l *Listener) <-chan error {
	t.Helper()
	errc := make(chan error, 8)
	go func() {
		for {
			c, err := l.Accept(context.Background())
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				errc <- err
				continue
			}
			go func() {
				defer c.Close()
				for {
					m, err := c.Recv(context.Background())
					if err != nil {
						return
					}
					if m.Op == "fail" {
						c.ReplyError(context.Background(), m, errors.New("no such file: "+m.Name))
						continue
					}
					for i := int64(1); i <= 2; i++ {
						c.Send(context.Background(), &Message{Type: TypeEvent, Op: "progress", Bytes: i * 10})
					}
					resp := *m
					resp.Name = "echo:" + m.Name
					c.Reply(context.Background(), m, &resp)
				}
			}()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return errc
}

func TestControlRequestReply(t *testing.T) {
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := GIDFromAddr(mustAddr(t, "198.51.100.2"))
	req := &Message{Op: "send", QPN: 0x11, PSN: 0xabcdef, GID: &g, MTU: 1024,
		Regions: []Region{{Addr: 0x7f0000001000, RKey: 0xdeadbeef, Len: 1 << 20}},
		Name:    "a.bin", Size: 1 << 20, SHA256: strings.Repeat("ab", 32), Params: map[string]string{"k": "v"}}
	var events []int64
	resp, err := c.Call(context.Background(), req, func(m *Message) { events = append(events, m.Bytes) })
	if err != nil {
		t.Fatal(err)
	}
	want := *req
	want.Type, want.ID, want.Name = TypeReply, 1, "echo:a.bin"
	if diff := cmp.Diff(&want, resp); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{10, 20}, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	_, err = c.Call(context.Background(), &Message{Op: "fail", Name: "x"}, nil)
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "no such file: x") {
		t.Errorf("error reply: %v, want ErrRemote with the server's text", err)
	}
	// The connection still works after an error reply, with the next ID.
	resp, err = c.Call(context.Background(), &Message{Op: "get", Name: "b"}, nil)
	if err != nil || resp.ID != 3 || resp.Name != "echo:b" {
		t.Errorf("third call: %+v, %v", resp, err)
	}
}

// The wire form is what the package comment says: a 4-byte big-endian length and JSON.
func TestControlWireFormat(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go newConn(a, 0).Send(context.Background(), &Message{Type: TypeHello, Proto: ProtocolName, Version: ProtocolVersion})
	var hdr [4]byte
	if _, err := io.ReadFull(b, hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	if got, want := string(body), `{"type":"hello","proto":"xdproce-cm","version":2}`; got != want {
		t.Errorf("hello frame %s, want %s", got, want)
	}
}

func TestControlRetryUntilServerStarts(t *testing.T) {
	// Find a free port, then start the server on it only after the client began dialing.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	go func() {
		time.Sleep(400 * time.Millisecond)
		l, err := Listen(addr, &Config{Insecure: true})
		if err != nil {
			t.Error(err)
			return
		}
		serveEcho(t, l)
	}()
	t0 := time.Now()
	c, err := Dial(context.Background(), addr, &Config{Retry: 5 * time.Second, Backoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if d := time.Since(t0); d < 350*time.Millisecond {
		t.Errorf("connected after %v, before the server started", d)
	}
}

func TestControlRefused(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	t0 := time.Now()
	_, err = Dial(context.Background(), addr, &Config{Retry: 300 * time.Millisecond, Backoff: 20 * time.Millisecond})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err %v, want ECONNREFUSED", err)
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("error %q does not name the address and the attempts", err)
	}
	if d := time.Since(t0); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("gave up after %v, want about the 300 ms retry window", d)
	}
	// No retry: one attempt.
	_, err = Dial(context.Background(), addr, &Config{Retry: -1})
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "1 attempt") {
		t.Errorf("single attempt: %v", err)
	}
	// Default port for a bare host.
	if got := withPort("198.51.100.2", DefaultPort); got != "198.51.100.2:18515" {
		t.Errorf("withPort: %s", got)
	}
	if got := withPort("2001:db8::1", 7); got != "[2001:db8::1]:7" {
		t.Errorf("withPort v6: %s", got)
	}
}

// fakeServer accepts one connection and answers the hello with frame.
func fakeServer(t *testing.T, frame []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var hdr [4]byte
		io.ReadFull(c, hdr[:])
		io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[:])))
		c.Write(frame)
		time.Sleep(100 * time.Millisecond)
	}()
	return ln.Addr().String()
}

func frameOf(t *testing.T, m any) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func TestControlNotXdproce(t *testing.T) {
	for name, frame := range map[string][]byte{
		"http":       []byte("HTTP/1.1 400 Bad Request\r\n\r\n"),
		"other json": frameOf(t, map[string]any{"type": "hello", "proto": "something-else"}),
		"huge frame": binary.BigEndian.AppendUint32(nil, MaxFrame+1),
		"closes":     nil,
	} {
		t.Run(name, func(t *testing.T) {
			addr := fakeServer(t, frame)
			_, err := Dial(context.Background(), addr, &Config{Retry: -1, Timeout: 2 * time.Second})
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("err %v, want ErrProtocol", err)
			}
		})
	}
}

func TestControlTLS(t *testing.T) {
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true, TLS: &TLSConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	fp := l.Fingerprint()
	if len(fp) != 64 {
		t.Fatalf("fingerprint %q", fp)
	}
	// Pinned, in the colon form people paste.
	var colons []string
	for i := 0; i < 64; i += 2 {
		colons = append(colons, strings.ToUpper(fp[i:i+2]))
	}
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{Fingerprint: strings.Join(colons, ":")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), &Message{Op: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()

	// Wrong pin: refused at once, no retries.
	t0 := time.Now()
	wrong := strings.Repeat("0", 64)
	_, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: 5 * time.Second, TLS: &TLSConfig{Fingerprint: wrong}})
	if !errors.Is(err, ErrFingerprintMismatch) || !strings.Contains(err.Error(), fp) {
		t.Errorf("wrong pin: %v", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("wrong pin took %v: retried", d)
	}
	// No pin, no CA: the error says what to do.
	_, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{}})
	if err == nil || !strings.Contains(err.Error(), "pin its fingerprint") {
		t.Errorf("unpinned: %v", err)
	}
	// TLS client, plain server.
	plain, err := Listen("127.0.0.1:0", &Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, plain)
	_, err = Dial(context.Background(), plain.Addr().String(), &Config{Retry: -1, Timeout: 2 * time.Second, TLS: &TLSConfig{Fingerprint: fp}})
	if err == nil || !strings.Contains(err.Error(), "--tls") {
		t.Errorf("tls client, plain server: %v", err)
	}
	// Plain client, TLS server: told to use TLS, with the fingerprint to pin.
	_, err = Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, Timeout: 2 * time.Second})
	if !errors.Is(err, ErrTLSRequired) || !strings.Contains(err.Error(), "server requires TLS (--tls-fingerprint "+fp+")") {
		t.Errorf("plain client, TLS server: %v", err)
	}
	if _, err := normFingerprint("abc"); err == nil {
		t.Error("short fingerprint accepted")
	}
}

func TestControlTLSFiles(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	fp, err := WriteSelfSigned("xdproce", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true, TLS: &TLSConfig{CertFile: cert, KeyFile: key}})
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	if l.Fingerprint() != fp {
		t.Errorf("listener fingerprint %s, file's %s", l.Fingerprint(), fp)
	}
	// The certificate as the CA, with its name.
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{CAFile: cert, ServerName: "xdproce"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The right CA but another name.
	if _, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1, TLS: &TLSConfig{CAFile: cert, ServerName: "other"}}); err == nil {
		t.Error("certificate accepted for the wrong name")
	}
	if _, err := Listen("127.0.0.1:0", &Config{Insecure: true, TLS: &TLSConfig{CertFile: cert}}); err == nil {
		t.Error("certificate without key accepted")
	}
	if _, err := Listen("127.0.0.1:0", &Config{Insecure: true, TLS: &TLSConfig{CertFile: key, KeyFile: cert}}); err == nil {
		t.Error("swapped files accepted")
	}
}

func TestControlContext(t *testing.T) {
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("accept: %v", err)
	}
	// The listener still works after a timed-out Accept.
	serveEcho(t, l)
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := c.Recv(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("recv: %v", err)
	}
}

// SendValue/RecvValue carry a caller's own messages over a connection cm set up.
func TestControlOwnMessages(t *testing.T) {
	type put struct {
		Kind string `json:"kind"`
		Off  int64  `json:"off"`
	}
	l, err := Listen("127.0.0.1:0", &Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan put, 1)
	go func() {
		c, err := l.Accept(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		var p put
		if err := c.RecvValue(context.Background(), &p); err != nil {
			t.Error(err)
		}
		got <- p
		c.SendValue(context.Background(), put{Kind: "ok", Off: p.Off + 1})
	}()
	c, err := Dial(context.Background(), l.Addr().String(), &Config{Retry: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SendValue(context.Background(), put{Kind: "data", Off: 41}); err != nil {
		t.Fatal(err)
	}
	var resp put
	if err := c.RecvValue(context.Background(), &resp); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != (put{Kind: "data", Off: 41}) || resp != (put{Kind: "ok", Off: 42}) {
		t.Errorf("server got %+v, client got %+v", p, resp)
	}
	if err := c.RecvValue(context.Background(), &resp); err != io.EOF {
		t.Errorf("after the server closed: %v, want io.EOF", err)
	}
	if err := c.SendValue(context.Background(), func() {}); err == nil {
		t.Error("a func encoded")
	}
}
