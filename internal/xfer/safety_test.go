package xfer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/roce"
)

// capturedDevices is loopDevices with the client's frames captured.
func capturedDevices(t *testing.T) (a, b *roce.Device, capture *testenv.Buffer) {
	t.Helper()
	if raceEnabled {
		t.Skip("see race_on_test.go")
	}
	capture = &testenv.Buffer{}
	a, b, err := LoopbackPair(20000+os.Getpid()%20000, capture)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, capture
}

// TestSymlinksStayInside: a link inside the served directory to a file
// inside is followed; a link to a file outside is refused with the reason,
// and not one of that file's bytes goes on the wire (the client's capture
// holds the inside file's content but not the outside one's); a put under
// the name of a link out replaces the link, never the file it points to.
func TestSymlinksStayInside(t *testing.T) {
	a, b, capture := capturedDevices(t)
	r := newRigServer(t, a, &Server{Dev: b, Dir: t.TempDir(), Overwrite: true}, &cm.Config{Insecure: true})
	outside := filepath.Join(t.TempDir(), "secret")
	secret := bytes.Repeat([]byte("OUTSIDE-SECRET-"), 1000)
	os.WriteFile(outside, secret, 0o600)
	inside := bytes.Repeat([]byte("inside-content-"), 1000)
	os.WriteFile(filepath.Join(r.dir, "real.txt"), inside, 0o644)
	os.Symlink("real.txt", filepath.Join(r.dir, "in.txt"))
	os.Symlink(outside, filepath.Join(r.dir, "link.txt"))
	os.Symlink("../"+filepath.Base(filepath.Dir(outside))+"/secret", filepath.Join(r.dir, "rel.txt"))

	dst := filepath.Join(t.TempDir(), "got")
	if _, err := Get(t.Context(), r.client, r.dial(t), "in.txt", dst, nil); err != nil {
		t.Fatalf("get through a link inside: %v", err)
	}
	if err := <-r.srvErr; err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, inside) {
		t.Fatalf("got %d bytes through the inside link", len(got))
	}
	os.Remove(dst)
	for _, name := range []string{"link.txt", "rel.txt"} {
		_, err := Get(t.Context(), r.client, r.dial(t), name, dst, nil)
		var re *RemoteError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), `"`+name+`" leads outside the served directory`) {
			t.Errorf("get %s: %v", name, err)
		}
		<-r.srvErr
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Errorf("get %s left %s", name, dst)
		}
	}
	// A put as link.txt (overwrite allowed and asked for) replaces the link.
	data := []byte("new content")
	if _, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "link.txt", &Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	<-r.srvErr
	if got, _ := os.ReadFile(outside); !bytes.Equal(got, secret) {
		t.Error("a put through a link changed the file outside")
	}
	if st, err := os.Lstat(filepath.Join(r.dir, "link.txt")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("link.txt after the put: %v %v", st, err)
	}
	a.Close()
	b.Close()
	w := capture.Bytes()
	if !bytes.Contains(w, inside[:64]) {
		t.Fatalf("the capture (%d bytes) lacks the inside file: it cannot show what went on the wire", len(w))
	}
	if bytes.Contains(w, []byte("OUTSIDE-SECRET")) {
		t.Error("bytes of the file outside the served directory are on the wire")
	}
}

// rawPut sends a put request for name on conn with a queue pair of the
// client device and returns the server's answer.
func rawPut(t *testing.T, r *rig, conn *cm.Conn, name string, size int64) message {
	t.Helper()
	c := newCtrl(t.Context(), conn)
	defer c.close()
	q, err := newQPConn(r.client, roce.RC, 4096, 1, 1, conn.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	req := &message{Type: msgPut, Version: ProtocolVersion, Name: name, Size: size}
	q.endpoint(req)
	c.send(req)
	var m message
	if err := c.recv(&m); err != nil {
		t.Fatalf("answer to a put of %q: %v", name, err)
	}
	return m
}

// TestControlCharacterNames: names with a newline or another control
// character are refused by the server with the reason, and nothing is
// written.
func TestControlCharacterNames(t *testing.T) {
	r := newRig(t, nil)
	if err := ValidName("bad\xffutf8"); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Errorf("ValidName of invalid UTF-8: %v", err)
	}
	for _, name := range []string{"a\nb", "tab\there", "nul\x00", "del\x7f", "c1\u0085"} {
		if err := ValidName(name); err == nil {
			t.Errorf("ValidName(%q) accepted", name)
		}
		m := rawPut(t, r, r.dial(t), name, 1)
		if m.Type != msgError || !strings.Contains(m.Error, "control characters are refused") {
			t.Errorf("put of %q: %+v", name, m)
		}
		<-r.srvErr
	}
	if ents, _ := os.ReadDir(r.dir); len(ents) != 0 {
		t.Errorf("files written: %v", ents)
	}
}

// TestOverwrite: an existing file is replaced only when the server allows
// it and the client asks; otherwise the put is refused with the reason and
// the file keeps its content.
func TestOverwrite(t *testing.T) {
	if raceEnabled {
		t.Skip("see race_on_test.go")
	}
	a, b := loopDevices(t)
	for _, tt := range []struct {
		overwrite, force bool
		want             string // "" when replaced
	}{
		{false, false, "send --force replaces it"},
		{false, true, "this server does not replace files (serve --overwrite)"},
		{true, false, "send --force replaces it"},
		{true, true, ""},
	} {
		r := newRigServer(t, a, &Server{Dev: b, Dir: t.TempDir(), Overwrite: tt.overwrite}, &cm.Config{Insecure: true})
		old := []byte("the old content")
		path := filepath.Join(r.dir, "f")
		os.WriteFile(path, old, 0o644)
		data := randomBytes(100<<10, 3)
		for _, o := range []*Options{{Force: tt.force}, {Force: tt.force, Enlarge: DefaultEnlargeConfig()}} {
			_, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "f", o)
			serr := <-r.srvErr
			got, _ := os.ReadFile(path)
			if tt.want == "" {
				if err != nil || serr != nil || !bytes.Equal(got, data) {
					t.Errorf("overwrite %v force %v enlarge %v: %v / %v, %d bytes", tt.overwrite, tt.force, o.Enlarge != nil, err, serr, len(got))
				}
				os.WriteFile(path, old, 0o644)
				continue
			}
			var re *RemoteError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tt.want) || !errors.Is(serr, ErrExists) {
				t.Errorf("overwrite %v force %v enlarge %v: client %v, server %v", tt.overwrite, tt.force, o.Enlarge != nil, err, serr)
			}
			if !bytes.Equal(got, old) {
				t.Errorf("overwrite %v force %v: the file changed", tt.overwrite, tt.force)
			}
		}
		assertNoTemp(t, r.dir)
	}
}

// TestUnauthenticatedPut: a server with a pre-shared key; a client without
// it, and one that skips the proof and sends a put straight after its
// hello, get no queue pair, no rkey and create no file.
func TestUnauthenticatedPut(t *testing.T) {
	if raceEnabled {
		t.Skip("see race_on_test.go")
	}
	a, b := loopDevices(t)
	key := []byte("0123456789abcdef0123")
	r := newRigServer(t, a, &Server{Dev: b, Dir: t.TempDir()}, &cm.Config{PSK: key})
	if _, err := cm.Dial(t.Context(), r.addr, &cm.Config{Retry: -1}); !errors.Is(err, cm.ErrAuth) {
		t.Errorf("client without the key: %v", err)
	}
	nc, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	frame := func(v any) {
		b, _ := json.Marshal(v)
		nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	}
	frame(cm.Message{Type: cm.TypeHello, Proto: cm.ProtocolName, Version: cm.ProtocolVersion, Caps: cm.Capabilities, Nonce: strings.Repeat("00", 32)})
	frame(message{Type: msgPut, Version: ProtocolVersion, Name: "intruder", Size: 10, QPN: 0x11, GID: "::ffff:127.0.0.1"})
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, _ := io.ReadAll(nc)
	if bytes.Contains(all, []byte(`"accept"`)) || bytes.Contains(all, []byte(`"rkey"`)) || bytes.Contains(all, []byte(`"qpn"`)) ||
		!bytes.Contains(all, []byte("authentication failed")) {
		t.Errorf("the server answered an unauthenticated put with %q", all)
	}
	if ents, _ := os.ReadDir(r.dir); len(ents) != 0 {
		t.Errorf("files created: %v", ents)
	}
	// With the key the same put goes through.
	c, err := cm.Dial(t.Context(), r.addr, &cm.Config{Retry: -1, PSK: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Send(t.Context(), r.client, c, bytes.NewReader([]byte("0123456789")), 10, "friend", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-r.srvErr; err != nil {
		t.Fatal(err)
	}
}
