package shm_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/shm"
)

// TestSendCopy: the frame arrives with hdr over its first bytes; a frame
// longer than a buffer is refused without an error; after Close it says
// ErrClosed.
func TestSendCopy(t *testing.T) {
	d, c := newPair(t, shm.Config{MTU: 1500, Ring: 64, Buffers: 48})
	frame := bytes.Repeat([]byte{0xab}, 200)
	hdr := []byte{1, 2, 3, 4}
	if ok, err := d.SendCopy(frame, hdr); !ok || err != nil {
		t.Fatalf("SendCopy = %v, %v", ok, err)
	}
	got := make([][]byte, 4)
	n, err := c.Receive(got)
	if err != nil || n != 1 {
		t.Fatalf("Receive = %d, %v", n, err)
	}
	want := append(append([]byte(nil), hdr...), frame[len(hdr):]...)
	if !bytes.Equal(got[0], want) {
		t.Fatalf("received %x..., want %x...", got[0][:8], want[:8])
	}
	if ok, err := d.SendCopy(make([]byte, 1<<16), nil); ok || err != nil {
		t.Fatalf("SendCopy of an oversized frame = %v, %v; want false, nil", ok, err)
	}
	d.Close()
	if _, err := d.SendCopy(frame, nil); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("SendCopy after Close: %v, want ErrClosed", err)
	}
}

// TestSendCopyRacesClose: deliveries while another goroutine closes the
// port (the daemon's client detaching) never write to unmapped memory. With
// Alloc, a copy and Send from the caller this crashed the xdproce daemon
// (SIGSEGV in the copy after Close's munmap).
func TestSendCopyRacesClose(t *testing.T) {
	frame := bytes.Repeat([]byte{0x5a}, 1400)
	for range 200 {
		d, fds, err := shm.NewPort(shm.Config{MTU: 1500, Ring: 64, Buffers: 48})
		if err != nil {
			t.Fatal(err)
		}
		c, err := shm.Attach(fds)
		if err != nil {
			d.Close()
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			rx := make([][]byte, 64)
			for {
				if _, err := d.SendCopy(frame, nil); errors.Is(err, link.ErrClosed) {
					return
				}
				c.Receive(rx) // keep the ring moving
			}
		}()
		d.Close()
		wg.Wait()
		c.Close()
	}
}
