package ooo_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// TestStream: through a pipe with 2 % loss and 10 % reorder both ways,
// eight ranges of 128 KiB added to one stream land byte for byte, each is
// reported delivered once and in the order added, although their
// operations were in flight together and some retried; Add after Close is
// refused.
func TestStream(t *testing.T) {
	const rng, count = 128 << 10, 8
	src, dst := make([]byte, rng*count), make([]byte, rng*count+4096)
	fill(src, 2)
	f := pipe.Faults{Loss: 0.02, Reorder: 0.1}
	p := newLane(t, pipe.Config{Seed: 21, AtoB: f, BtoA: f}, src, dst, 16, 0)
	w := newWriter(t, ooo.Config{MaxPackets: 8, Loss: 0.02, MaxTries: 64}, p.lane())
	var got []uint64
	s, err := w.Stream(withTimeout(t, 60*time.Second), roce.NotifyInitiator, func(local, remote uint64, n int) error {
		if n != rng || remote != local+4096 {
			t.Errorf("delivered %d bytes from %d to %d", n, local, remote)
		}
		got = append(got, local)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range count {
		if err := s.Add(uint64(i*rng), uint64(i*rng+4096), rng); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("%v (stats %+v)", err, w.Stats())
	}
	if !bytes.Equal(dst[4096:], src) {
		t.Fatal("bytes differ")
	}
	if len(got) != count {
		t.Fatalf("%d ranges reported delivered, want %d", len(got), count)
	}
	for i, l := range got {
		if l != uint64(i*rng) {
			t.Fatalf("delivered in the order %v", got)
		}
	}
	st := w.Stats()
	t.Logf("stats %+v", st)
	if st.Retries == 0 || st.Bytes != rng*count || st.Attempts != st.Delivered+st.Retries {
		t.Errorf("stats %+v: want retries, every byte delivered once", st)
	}
	if err := s.Add(0, 0, 1); err == nil {
		t.Error("Add after Close accepted")
	}
	// The writer serves the next call.
	if err := w.Write(withTimeout(t, 30*time.Second), 0, 0, 4096, roce.NotifyInitiator); err != nil {
		t.Fatal(err)
	}
}

// TestStreamEnds: a delivered callback's error ends the stream with it;
// on a blackholed lane the stream ends with ErrTooManyTries and then Add
// reports it.
func TestStreamEnds(t *testing.T) {
	src, dst := make([]byte, 1<<16), make([]byte, 1<<16)
	p := newLane(t, pipe.Config{Seed: 1}, src, dst, 2, 0)
	w := newWriter(t, ooo.Config{First: 5 * time.Millisecond, MaxTries: 2}, p.lane())
	stop := errors.New("stop here")
	s, err := w.Stream(withTimeout(t, 10*time.Second), roce.NotifyInitiator, func(uint64, uint64, int) error { return stop })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(0, 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, stop) {
		t.Fatalf("Close: %v, want the callback's error", err)
	}

	p.la.SetFaults(pipe.Faults{Loss: 1})
	s, err = w.Stream(withTimeout(t, 10*time.Second), roce.NotifyInitiator, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(0, 0, 100); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for err = s.Add(0, 0, 100); err == nil && time.Now().Before(deadline); err = s.Add(0, 0, 100) {
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(err, ooo.ErrTooManyTries) {
		t.Fatalf("Add on a failed stream: %v, want ErrTooManyTries", err)
	}
	if err := s.Close(); !errors.Is(err, ooo.ErrTooManyTries) {
		t.Fatalf("Close: %v", err)
	}
	if _, err := w.Stream(withTimeout(t, time.Second), roce.NotifyTarget, nil); err == nil {
		t.Error("a Stream without NotifyInitiator was accepted")
	}
}
