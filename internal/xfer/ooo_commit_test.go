package xfer

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce/ooo"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestSendOOOCommitCapture: send --mode ooo ends with the conditional
// commit. In the client's capture, the commit record's first frame comes
// after the completion packet of the last chunk: every chunk's completion
// is in before it, and the only completion after it is the commit's own.
// The file is stored byte-exact.
func TestSendOOOCommitCapture(t *testing.T) {
	la, lb, err := pipe.New(pipe.Config{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	var pcap bytes.Buffer
	cw, err := capture.NewWriter(&pcap, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := devicesOn(t, capture.Wrap(la, cw), lb)
	r := newRigOn(t, a, b, nil)
	data := randomBytes(3*(64<<10)+5000, 77)
	oo := &Options{SlotSize: 64 << 10, Slots: 2, OOO: &ooo.Config{MaxPackets: 4, Timeout: time.Second}}
	res, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "c", oo)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-r.srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(r.dir, "c")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, len(data))
	}
	if !res.OOO.Commit || res.OOO.CommitsPosted != 1 || res.OOO.Retries != 0 {
		t.Fatalf("result %+v: want the commit, posted once, no retry", *res.OOO)
	}
	a.Close()
	if err := cw.Flush(); err != nil {
		t.Fatal(err)
	}
	rd, err := capture.NewReader(bytes.NewReader(pcap.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var (
		f                         capture.Frame
		writes, cpls, lastCpl     int
		first, lastData, cplAfter = -1, -1, 0
		commitCtx                 wire.Ctx
	)
	for i := 0; ; i++ {
		if err := rd.Next(&f); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var pk wire.Packet
		if pk.DecodeWith(f.Data, wire.AcceptOOO) != nil {
			continue
		}
		switch {
		case pk.BTH.Opcode == wire.OOOWrite && bytes.HasPrefix(pk.Payload, []byte(commitMagic)):
			if first < 0 {
				first, commitCtx = i, pk.XRH.Ctx
			}
		case pk.BTH.Opcode == wire.OOOWrite:
			writes++
			lastData = i
		case pk.BTH.Opcode == wire.OOOCompletion && first >= 0:
			cplAfter++
			if pk.XRH.Initiator != commitCtx {
				t.Errorf("frame %d: a chunk's completion after the commit's first frame %d", i, first)
			}
		case pk.BTH.Opcode == wire.OOOCompletion:
			cpls++
			lastCpl = i
		}
	}
	if first < 0 || uint64(cpls) != res.OOO.Delivered || lastData > first || lastCpl > first || cplAfter != 1 {
		t.Fatalf("commit's first frame %d; %d chunk completions before it (last at %d; %d operations delivered), "+
			"last chunk frame %d, %d completions after it", first, cpls, lastCpl, res.OOO.Delivered, lastData, cplAfter)
	}
	t.Logf("%d chunk frames, %d chunk completions (the last at frame %d), commit's first frame %d", writes, cpls, lastCpl, first)
}

// spoilLink corrupts (so that the receiver drops them: bad ICRC) the OOO
// completion packets it sends for operations of spoilTotal bytes.
type spoilLink struct {
	link.Link
	spoiled atomic.Int32
}

const spoilTotal = commitLen

func (s *spoilLink) Send(frames [][]byte) error {
	var p wire.Packet
	for _, f := range frames {
		if p.DecodeWith(f, wire.AcceptOOO) == nil && p.BTH.Opcode == wire.OOOCompletion && p.XRH.Total == spoilTotal {
			f[len(f)-1] ^= 0xFF
			s.spoiled.Add(1)
		}
	}
	return s.Link.Send(frames)
}

// TestSendOOOCommitCompletionLost: the completion packet of the commit is
// lost; the server has committed (and closed its queue pair), so no reissue
// of the commit would be answered. The server's ok over the control
// connection ends the send at once, successful.
func TestSendOOOCommitCompletionLost(t *testing.T) {
	la, lb, err := pipe.New(pipe.Config{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	sl := &spoilLink{Link: lb}
	a, b := devicesOn(t, la, sl)
	r := newRigOn(t, a, b, nil)
	data := randomBytes(100_000, 78)
	oo := &Options{SlotSize: 64 << 10, Slots: 2, OOO: &ooo.Config{Timeout: 50 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	res, err := Send(ctx, r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "lost", oo)
	if err != nil {
		t.Fatalf("send with the commit's completion lost: %v", err)
	}
	if err := <-r.srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(r.dir, "lost")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, len(data))
	}
	if sl.spoiled.Load() == 0 || !res.OOO.Commit {
		t.Fatalf("%d completions spoiled, result %+v", sl.spoiled.Load(), *res.OOO)
	}
	t.Logf("done in %v, %d completion packets spoiled, %+v", time.Since(start), sl.spoiled.Load(), *res.OOO)
}
