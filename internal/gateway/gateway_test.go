package gateway

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
)

const window = 32

// windows returns the set of every window-byte run of b.
func windows(b []byte) map[[window]byte]struct{} {
	set := make(map[[window]byte]struct{}, max(len(b)-window+1, 0))
	for i := 0; i+window <= len(b); i++ {
		set[[window]byte(b[i:i+window])] = struct{}{}
	}
	return set
}

// leaked returns the offset of the first window of data that appears in
// set, or -1.
func leaked(data []byte, set map[[window]byte]struct{}) int {
	for i := 0; i+window <= len(data); i++ {
		if _, ok := set[[window]byte(data[i:i+window])]; ok {
			return i
		}
	}
	return -1
}

// TestControlBytes: a PUT and a GET through the gateway move a random file
// byte-exact while the node's control connection carries a fixed cost plus
// a small one per slot, and no 32-byte run of the file.
func TestControlBytes(t *testing.T) {
	const slotSize = 256 << 10
	r := newRig(t, &xfer.Options{SlotSize: slotSize, Slots: 4})
	data := randomBytes(6<<20+12345, 1)
	slots := (len(data) + slotSize - 1) / slotSize
	// The hello with the PSK challenge, the request and the accept (queue
	// pair, staging buffer), the end with the SHA-256 and the verdict; on
	// lmrm nothing per slot, with the slot protocol (a node from before
	// lmrm) one data and one free message per slot, which the limit allows.
	const fixed, perSlot = 2048, 96
	limit := fixed + perSlot*slots

	if st, _, body := r.do(t, http.MethodPut, "/f.bin", data); st != http.StatusCreated {
		t.Fatalf("PUT: %d %s", st, body)
	}
	if got, err := os.ReadFile(filepath.Join(r.dir, "f.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, len(data))
	}
	st, hdr, got := r.do(t, http.MethodGet, "/f.bin", nil)
	if st != http.StatusOK || !bytes.Equal(got, data) || hdr.Get("Content-Length") != fmt.Sprint(len(data)) {
		t.Fatalf("GET: %d, %d bytes (Content-Length %s), want %d byte-exact", st, len(got), hdr.Get("Content-Length"), len(data))
	}
	conns := r.rec.take()
	if len(conns) != 2 {
		t.Fatalf("%d control connections, want 2 (one per request)", len(conns))
	}
	var all []byte
	for i, c := range conns {
		sent, recv := c.bytes()
		n := len(sent) + len(recv)
		t.Logf("%s: %d bytes on the control connection (%d sent, %d received) for %d slots; limit %d",
			[]string{"PUT", "GET"}[i], n, len(sent), len(recv), slots, limit)
		if n > limit || n == 0 {
			t.Errorf("%s: %d control bytes for %d slots of a %d-byte file, want at most %d + %d per slot",
				[]string{"PUT", "GET"}[i], n, slots, len(data), fixed, perSlot)
		}
		all = append(append(all, sent...), recv...)
	}
	if i := leaked(data, windows(all)); i >= 0 {
		t.Errorf("the file's bytes %d..%d appear on the control connection", i, i+window)
	}
}

// TestStreamBounded: a GET of a large file allocates far less than the file
// in the gateway's process: it is streamed, not buffered.
func TestStreamBounded(t *testing.T) {
	r := newRig(t, nil)
	const size = 96 << 20
	data := randomBytes(size, 2)
	if err := os.WriteFile(filepath.Join(r.dir, "big"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	data = nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := http.Get(r.url + "/big")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := copyBody(h, resp)
	runtime.ReadMemStats(&after)
	if err != nil || n != size || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("GET: %d bytes (%v), want %d with the file's SHA-256", n, err, size)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("GET of %d MiB allocated %d MiB in this process (gateway, node and client)", size>>20, alloc>>20)
	// The node's and the gateway's staging buffers (16 MiB each), the slot
	// held back, the node's reads: well under the file.
	if alloc > size/2 {
		t.Errorf("GET of %d bytes allocated %d bytes: not streamed", size, alloc)
	}
}

// TestCutShort: a GET whose transfer fails after the response began ends
// with the body cut short, never with a complete body.
func TestCutShort(t *testing.T) {
	r := newRig(t, &xfer.Options{SlotSize: 64 << 10, Slots: 2})
	const size = 64 << 20
	if err := os.WriteFile(filepath.Join(r.dir, "big"), randomBytes(size, 4), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(r.url + "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != size {
		t.Fatalf("GET: %d, Content-Length %d", resp.StatusCode, resp.ContentLength)
	}
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	r.stopNode()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || int64(len(head))+n >= size {
		t.Errorf("after the node stopped the body went on to %d of %d bytes (%v), want it cut short with an error", int64(len(head))+n, size, err)
	}
}

// TestStatuses: ranges, empty and one-byte files, and the error statuses.
func TestStatuses(t *testing.T) {
	r := newRig(t, &xfer.Options{SlotSize: 64 << 10, Slots: 2})
	data := randomBytes(300000, 3)
	for _, f := range []struct {
		name string
		b    []byte
	}{{"big", data}, {"empty", []byte{}}, {"one", []byte{42}}} {
		if st, _, body := r.do(t, http.MethodPut, "/"+f.name, f.b); st != http.StatusCreated {
			t.Fatalf("PUT %s: %d %s", f.name, st, body)
		}
		if st, _, got := r.do(t, http.MethodGet, "/"+f.name, nil); st != http.StatusOK || !bytes.Equal(got, f.b) {
			t.Fatalf("GET %s: %d, %d bytes, want %d byte-exact", f.name, st, len(got), len(f.b))
		}
	}
	n := int64(len(data))
	ranges := []struct {
		hdr          string
		status       int
		from, to     int64 // the bytes expected, to exclusive
		contentRange string
	}{
		{"bytes=10-99", 206, 10, 100, "bytes 10-99/300000"},
		{"bytes=299990-", 206, 299990, n, "bytes 299990-299999/300000"},
		{"bytes=-100", 206, n - 100, n, "bytes 299900-299999/300000"},
		{"bytes=-400000", 206, 0, n, "bytes 0-299999/300000"},
		{"bytes=100-9999999", 206, 100, n, "bytes 100-299999/300000"},
		{"bytes=0-0", 206, 0, 1, "bytes 0-0/300000"},
		{"bytes=300000-", 416, 0, 0, "bytes */300000"},
		{"bytes=-0", 416, 0, 0, ""},
		{"bytes=0-1,5-6", 200, 0, n, ""},
		{"items=0-1", 200, 0, n, ""},
		{"bytes=9-3", 200, 0, n, ""},
	}
	for _, c := range ranges {
		st, hdr, got := r.do(t, http.MethodGet, "/big", nil, "Range", c.hdr)
		if st != c.status || hdr.Get("Content-Range") != c.contentRange {
			t.Errorf("Range %s: %d Content-Range %q, want %d %q (%s)", c.hdr, st, hdr.Get("Content-Range"), c.status, c.contentRange, got)
			continue
		}
		if st < 300 && !bytes.Equal(got, data[c.from:c.to]) {
			t.Errorf("Range %s: %d bytes, want bytes %d..%d", c.hdr, len(got), c.from, c.to)
		}
	}
	if st, _, got := r.do(t, http.MethodGet, "/one", nil, "Range", "bytes=0-"); st != 206 || !bytes.Equal(got, []byte{42}) {
		t.Errorf("Range 0- of a one-byte file: %d %q", st, got)
	}
	if st, _, got := r.do(t, http.MethodGet, "/empty", nil, "Range", "bytes=-5"); st != 200 || len(got) != 0 {
		t.Errorf("Range -5 of an empty file: %d %q, want 200 and nothing", st, got)
	}
	if st, hdr, _ := r.do(t, http.MethodGet, "/empty", nil, "Range", "bytes=0-"); st != 416 || hdr.Get("Content-Range") != "bytes */0" {
		t.Errorf("Range 0- of an empty file: %d %q, want 416", st, hdr.Get("Content-Range"))
	}

	errs := []struct {
		method, path string
		body         []byte
		hdr          []string
		status       int
		want         string
	}{
		{"GET", "/missing", nil, nil, 404, `no file "missing"`},
		{"PUT", "/one", []byte("xy"), nil, 409, "exists"},
		{"GET", "/.hidden", nil, nil, 400, "hidden"},
		{"PUT", "/a%2Fb", []byte("x"), nil, 400, "directories"},
		{"DELETE", "/one", nil, nil, 405, "GET and PUT"},
		{"GET", "/", nil, nil, 400, "empty file name"},
	}
	for _, c := range errs {
		st, _, body := r.do(t, c.method, c.path, c.body, c.hdr...)
		if st != c.status || !strings.Contains(string(body), c.want) || strings.Count(string(body), "\n") != 1 {
			t.Errorf("%s %s: %d %q, want %d and one line with %q", c.method, c.path, st, body, c.status, c.want)
		}
	}
	if st, _, body := r.do(t, http.MethodPut, "/one?overwrite=1", []byte("xy")); st != 201 {
		t.Errorf("PUT ?overwrite=1: %d %s", st, body)
	} else if got, _ := os.ReadFile(filepath.Join(r.dir, "one")); string(got) != "xy" {
		t.Errorf("after PUT ?overwrite=1 the node has %q", got)
	}

	// A body of unknown length (chunked) is refused with 411.
	req, _ := http.NewRequest(http.MethodPut, r.url+"/chunked", strings.NewReader("abc"))
	req.ContentLength = -1
	req.TransferEncoding = []string{"chunked"}
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 411 {
		t.Errorf("chunked PUT: %v %v, want 411", resp, err)
	} else {
		resp.Body.Close()
	}
	if _, err := os.Stat(filepath.Join(r.dir, "chunked")); err == nil {
		t.Error("a chunked PUT stored a file")
	}

	// A node without spans (an older xdproce): a Range GET gets 501, a
	// whole GET still works.
	saved := cm.Capabilities
	cm.Capabilities = slices.DeleteFunc(slices.Clone(saved), func(c string) bool { return c == cm.CapRange })
	st, _, body := r.do(t, http.MethodGet, "/big", nil, "Range", "bytes=0-9")
	st2, _, got := r.do(t, http.MethodGet, "/one", nil)
	cm.Capabilities = saved
	if st != 501 || !strings.Contains(string(body), cm.CapRange) {
		t.Errorf("Range GET from a node without %s: %d %q, want 501", cm.CapRange, st, body)
	}
	if st2 != 200 || string(got) != "xy" {
		t.Errorf("GET from a node without %s: %d %q", cm.CapRange, st2, got)
	}

	// A gateway with the wrong key: the node refuses it in the hello, 502.
	good := r.gw.Ctrl
	r.gw.Ctrl = &cm.Config{PSK: []byte("not the node's key, long enough"), Retry: -1}
	st, _, body = r.do(t, http.MethodGet, "/one", nil)
	r.gw.Ctrl = good
	if st != 502 || !strings.Contains(string(body), "did not accept the gateway") || !strings.Contains(string(body), cm.ErrAuth.Error()) {
		t.Errorf("GET with the wrong key: %d %q, want 502 naming %v", st, body, cm.ErrAuth)
	}

	// An unreachable node: 502.
	r.gw.Node = "127.0.0.2:1"
	if st, _, body := r.do(t, http.MethodGet, "/one", nil); st != 502 || !strings.Contains(string(body), "unreachable") {
		t.Errorf("GET with the node down: %d %q, want 502", st, body)
	}
}

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		h     string
		want  *xfer.Span
		unsat bool
	}{
		{"bytes=0-9", &xfer.Span{Count: 10}, false},
		{"bytes=5-", &xfer.Span{From: 5}, false},
		{"bytes=-7", &xfer.Span{From: -7}, false},
		{" bytes= 3-3", &xfer.Span{From: 3, Count: 1}, false},
		{"bytes=-0", nil, true},
		{"bytes=0-9223372036854775807", &xfer.Span{}, false},
		{"bytes=1-2,4-5", nil, false},
		{"bytes=a-b", nil, false},
		{"bytes=+1-2", nil, false},
		{"bytes=5-4", nil, false},
		{"bytes=-", nil, false},
		{"bits=0-1", nil, false},
		{"bytes=0", nil, false},
	} {
		got, unsat := parseRange(c.h)
		if unsat != c.unsat || (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("parseRange(%q) = %+v, %v; want %+v, %v", c.h, got, unsat, c.want, c.unsat)
		}
	}
}
