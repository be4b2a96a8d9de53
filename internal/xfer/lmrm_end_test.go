package xfer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// cutLink spoils (bad ICRC: the receiver drops them) every RC RDMA WRITE
// frame it sends once the first WRITE WITH IMMEDIATE has gone: an lmrm
// sender's first slot lands, the others (and their retransmissions) never
// do.
type cutLink struct {
	link.Link
	passed  atomic.Bool
	spoiled atomic.Int32
}

func (s *cutLink) Send(frames [][]byte) error {
	var p wire.Packet
	for _, f := range frames {
		if p.Decode(f) != nil {
			continue
		}
		switch op := p.BTH.Opcode; {
		case op < wire.RCWriteFirst || op > wire.RCWriteOnlyImm:
		case s.passed.Load():
			f[len(f)-1] ^= 0xFF
			s.spoiled.Add(1)
		case op == wire.RCWriteLastImm || op == wire.RCWriteOnlyImm:
			s.passed.Store(true)
		}
	}
	return s.Link.Send(frames)
}

// TestLMRMWriteFailsAfterEnd: an lmrm sender sends its end message once the
// last write is posted. When writes fail after that (every WRITE frame after
// the first slot is dropped and the queue pair's retries run out), the
// sender says so on the control connection and the receiver ends at once
// with that reason, not after waiting endDataWait for data that is not
// coming. Both ends fail and nothing is stored, for a put (the client
// writes) and a get (the server writes). The file fills the pool, so every
// write is posted without a slot coming back: the failure comes after the
// end.
func TestLMRMWriteFailsAfterEnd(t *testing.T) {
	co := roce.DefaultConnectOptions()
	co.Timeout, co.RetryCnt = 10, 1 // 4 ms, one retry
	opts := &Options{SlotSize: 64 << 10, Slots: 4, Connect: &co}
	data := randomBytes(4*64<<10, 91)
	for _, dir := range []string{"put", "get"} {
		t.Run(dir, func(t *testing.T) {
			la, lb, err := pipe.New(pipe.Config{MTU: 4200})
			if err != nil {
				t.Fatal(err)
			}
			var cut *cutLink
			var a, b *roce.Device
			if dir == "put" {
				cut = &cutLink{Link: la}
				a, b = devicesOn(t, cut, lb)
			} else {
				cut = &cutLink{Link: lb}
				a, b = devicesOn(t, la, cut)
			}
			r := newRigOn(t, a, b, opts)
			ctx, cancel := context.WithTimeout(t.Context(), endDataWait/2)
			defer cancel()
			start := time.Now()
			var cerr error
			dst := filepath.Join(t.TempDir(), "copy")
			if dir == "put" {
				_, cerr = Send(ctx, r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "cut", opts)
			} else {
				if err := os.WriteFile(filepath.Join(r.dir, "cut"), data, 0o644); err != nil {
					t.Fatal(err)
				}
				_, cerr = Get(ctx, r.client, r.dial(t), "cut", dst, opts)
			}
			serr := <-r.srvErr
			took := time.Since(start)
			// The receiver has the sender's reason; the sender its own.
			recvErr, sendErr := serr, cerr
			if dir == "get" {
				recvErr, sendErr = cerr, serr
			}
			var re *RemoteError
			if !errors.As(recvErr, &re) || !strings.Contains(re.Msg, "after the end message") {
				t.Fatalf("receiver: %v, want the sender's remote error about a write failing after the end", recvErr)
			}
			if sendErr == nil || !strings.Contains(sendErr.Error(), "after the end message") {
				t.Fatalf("sender: %v, want the write failure after the end", sendErr)
			}
			if cut.spoiled.Load() == 0 {
				t.Fatal("no WRITE frame was dropped")
			}
			if dir == "put" {
				if _, err := os.Stat(filepath.Join(r.dir, "cut")); !os.IsNotExist(err) {
					t.Errorf("a failed put stored the file: %v", err)
				}
				assertNoTemp(t, r.dir)
			} else {
				if _, err := os.Stat(dst); !os.IsNotExist(err) {
					t.Errorf("a failed get stored the file: %v", err)
				}
				assertNoTemp(t, filepath.Dir(dst))
			}
			t.Logf("failed in %v, %d WRITE frames dropped; receiver: %v; sender: %v", took, cut.spoiled.Load(), recvErr, sendErr)
		})
	}
}
