package xfer

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestBackHash: a sink that hashes behind writes slots of uneven sizes to a
// file and its SHA-256 comes out as the file's; the read buffer's boundary
// falls inside slots and between them.
func TestBackHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 21))
	data := make([]byte, 3*hashBackBuf+12345)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got int64
	k := &sink{w: f, h: sha256.New(), size: int64(len(data)), progress: func(done, _ int64) { got = done }}
	k.hashBehind(f)
	defer k.stopHash()
	for off := 0; off < len(data); {
		n := min(1+rng.IntN(hashBackBuf*3/2), len(data)-off)
		k.deliver(0, 0, data[off:off+n])
		off += n
	}
	if k.err != nil {
		t.Fatal(k.err)
	}
	if err := k.hashed(); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if !bytes.Equal(k.h.Sum(nil), want[:]) || k.next != int64(len(data)) || got != int64(len(data)) {
		t.Fatalf("sum %x, next %d, progress %d; want %x, %d", k.h.Sum(nil), k.next, got, want, len(data))
	}
	if err := k.hashed(); err != nil { // a second wait is harmless
		t.Fatal(err)
	}
	k.deliver(0, 0, nil) // after the hasher ended: nothing to announce, no panic
}

// shortReader is a ReaderAt whose bytes end at n.
type shortReader struct{ n int64 }

func (r shortReader) ReadAt(b []byte, off int64) (int, error) {
	if off >= r.n {
		return 0, io.EOF
	}
	m := min(int64(len(b)), r.n-off)
	clear(b[:m])
	if m < int64(len(b)) {
		return int(m), io.EOF
	}
	return int(m), nil
}

// TestBackHashReadFails: bytes announced but not there to read back are an
// error from wait, and stop ends a hasher with bytes left unhashed.
func TestBackHashReadFails(t *testing.T) {
	b := newBackHash(shortReader{n: 1000}, sha256.New())
	b.written(500)
	b.written(2000)
	if err := b.wait(); !errors.Is(err, io.EOF) {
		t.Fatalf("wait: %v, want a read-back failure wrapping EOF", err)
	}

	s := newBackHash(shortReader{n: 1 << 40}, sha256.New())
	s.quit.Store(true) // what stop does first, before any byte is hashed
	s.written(1 << 40) // a terabyte announced: only quit makes this end
	s.stop()
}
