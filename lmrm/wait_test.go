package lmrm_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/lmrm"
)

// TestWaitAndStaging: Wait blocks until a completion comes and handles it
// (the pool is granted, the provider delivers, the release comes back);
// with nothing to come it returns the context's error after the deadline
// and the end still works; a slot filled through Staging arrives as written.
func TestWaitAndStaging(t *testing.T) {
	pr := newPair(t, lmrm.Config{}, &lmrm.ProviderConfig{Batch: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The provider's end: Wait until every message is delivered.
	done := make(chan error, 1)
	go func() {
		for {
			pr.mu.Lock()
			n := len(pr.got)
			pr.mu.Unlock()
			if n == 2 {
				done <- nil
				return
			}
			if err := pr.p.Wait(ctx); err != nil {
				done <- err
				return
			}
		}
	}()
	if err := pr.r.Alloc(2*256, 256); err != nil {
		t.Fatal(err)
	}
	for pr.r.Stats().Pools == 0 {
		if err := pr.r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := [][]byte{bytes.Repeat([]byte("staged"), 40), []byte("copied")}
	for i, w := range want {
		s, err := pr.r.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		data := w
		if i == 0 {
			buf, err := pr.r.Staging(s)
			if err != nil || len(buf) != 256 {
				t.Fatalf("staging: %d bytes, %v", len(buf), err)
			}
			data = buf[:copy(buf, w)]
		}
		if err := pr.r.Write(s, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("provider: %v", err)
	}
	for pr.r.Stats().Free < 2 {
		if err := pr.r.Wait(ctx); err != nil {
			t.Fatalf("waiting for the releases: %v (%+v)", err, pr.r.Stats())
		}
	}
	pr.mu.Lock()
	got := pr.got
	pr.mu.Unlock()
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("message %d: %q, want %q", i, got[i], want[i])
		}
	}
	// Nothing more comes: Wait ends with the deadline, and that is not a
	// failure of the requester.
	short, cancel2 := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel2()
	if err := pr.r.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with nothing to come: %v", err)
	}
	if err := pr.r.Progress(); err != nil {
		t.Fatalf("Progress after a Wait that timed out: %v", err)
	}
	if st := pr.r.Stats(); st.Writing != 0 || st.Free != 2 {
		t.Errorf("stats %+v: want nothing writing, 2 free", st)
	}
}
