package capture

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
)

// fakeLink hands out fixed received frames and keeps what is sent.
type fakeLink struct {
	rx     [][]byte
	sent   [][]byte
	keep   bool
	closed bool
}

func (l *fakeLink) Receive(frames [][]byte) (int, error) {
	n := copy(frames, l.rx)
	return n, nil
}
func (l *fakeLink) Alloc(bufs [][]byte) int { return 0 }
func (l *fakeLink) Send(frames [][]byte) error {
	if l.keep {
		for _, f := range frames {
			l.sent = append(l.sent, bytes.Clone(f))
		}
	}
	return nil
}
func (l *fakeLink) Free([][]byte)            {}
func (l *fakeLink) Wait(time.Duration) error { return nil }
func (l *fakeLink) Wake()                    {}
func (l *fakeLink) Props() link.Props        { return link.Props{Name: "pipe", MTU: 1500, MaxFrame: 2048} }
func (l *fakeLink) Close() error             { l.closed = true; return nil }

func TestWrapRecordsBothDirections(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	in1, in2, out1 := []byte("received-frame-1"), []byte("received-2"), []byte("sent-frame")
	inner := &fakeLink{rx: [][]byte{in1, in2}, keep: true}
	l := Wrap(inner, w)
	frames := make([][]byte, 4)
	before := time.Now()
	if n, err := l.Receive(frames); n != 2 || err != nil {
		t.Fatalf("Receive = %d, %v", n, err)
	}
	if err := l.Send([][]byte{out1}); err != nil {
		t.Fatal(err)
	}
	if len(inner.sent) != 1 || !bytes.Equal(inner.sent[0], out1) {
		t.Fatalf("inner link got %q", inner.sent)
	}
	if l.Props().Name != "pipe" {
		t.Errorf("Props not passed through: %+v", l.Props())
	}
	if err := l.Close(); err != nil || !inner.closed {
		t.Fatalf("Close = %v, inner closed %v", err, inner.closed)
	}
	after := time.Now()

	r, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		dir  Direction
		data []byte
	}{{DirInbound, in1}, {DirInbound, in2}, {DirOutbound, out1}}
	var f Frame
	for i, w := range want {
		if err := r.Next(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Dir != w.dir || !bytes.Equal(f.Data, w.data) || f.Time.Before(before.Truncate(time.Nanosecond)) || f.Time.After(after) {
			t.Errorf("frame %d: %v %q at %v, want %v %q in [%v, %v]", i, f.Dir, f.Data, f.Time, w.dir, w.data, before, after)
		}
	}
	if err := r.Next(&f); err != io.EOF {
		t.Errorf("extra frames: %v", err)
	}
	ifs := r.Interfaces()
	if len(ifs) != 1 || ifs[0].Name != "pipe" || ifs[0].Description != "xdproce link pipe, MTU 1500" {
		t.Errorf("interfaces %+v", ifs)
	}
}

// TestWrapSharedWriter: two links on one writer get two interfaces.
func TestWrapSharedWriter(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, nil)
	a := WrapInterface(&fakeLink{}, w, Interface{Name: "a"})
	b := WrapInterface(&fakeLink{}, w, Interface{Name: "b"})
	b.Send([][]byte{[]byte("from-b")})
	a.Send([][]byte{[]byte("from-a")})
	w.Flush()
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	for _, want := range []struct {
		iface int
		name  string
		data  string
	}{{1, "b", "from-b"}, {0, "a", "from-a"}} {
		if err := r.Next(&f); err != nil {
			t.Fatal(err)
		}
		if f.Interface != want.iface || string(f.Data) != want.data || r.Interfaces()[f.Interface].Name != want.name {
			t.Errorf("got iface %d %q, want %d (%s) %q", f.Interface, f.Data, want.iface, want.name, want.data)
		}
	}
}

func TestWrapWriteErrorSurfacesAtClose(t *testing.T) {
	w, _ := NewWriter(failWriter{}, nil)
	l := Wrap(&fakeLink{}, w)
	if err := l.Send([][]byte{make([]byte, 1000)}); err != nil {
		t.Fatalf("Send must not fail for a capture error: %v", err)
	}
	if err := l.Close(); !errors.Is(err, errDisk) {
		t.Errorf("Close = %v, want errDisk", err)
	}
}

func TestWrapNoAlloc(t *testing.T) {
	w, _ := NewWriter(io.Discard, nil)
	frame := make([]byte, 1078)
	inner := &fakeLink{rx: [][]byte{frame, frame, frame, frame}}
	l := Wrap(inner, w)
	batch := make([][]byte, 4)
	tx := [][]byte{frame, frame}
	allocs := testing.AllocsPerRun(1000, func() {
		l.Receive(batch)
		l.Send(tx)
	})
	if allocs != 0 {
		t.Errorf("wrapped Receive+Send allocate %.1f times, want 0", allocs)
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkWrapSendReceive(b *testing.B) {
	w, _ := NewWriter(io.Discard, nil)
	frame := make([]byte, 1078)
	inner := &fakeLink{rx: [][]byte{frame, frame, frame, frame, frame, frame, frame, frame}}
	l := Wrap(inner, w)
	batch := make([][]byte, 8)
	b.ReportAllocs()
	b.SetBytes(int64(16 * len(frame)))
	for b.Loop() {
		l.Receive(batch)
		l.Send(batch)
	}
}

// TestWrapBadInterface: an interface the Writer refuses makes the Writer fail,
// so Close reports it instead of silently recording nothing.
func TestWrapBadInterface(t *testing.T) {
	w, _ := NewWriter(io.Discard, nil)
	l := WrapInterface(&fakeLink{}, w, Interface{Name: string(make([]byte, 70000))})
	if err := l.Send([][]byte{[]byte("x")}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "longer than 65535") {
		t.Errorf("Close = %v, want the add-interface error", err)
	}
}
