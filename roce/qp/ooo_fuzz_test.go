package qp

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// FuzzReceiveOOO feeds arbitrary frames (seeded with the OOO golden
// captures, whose contexts and keys are this pair's, so the seeds reach
// live contexts) to an OOO queue pair holding contexts, with receive work
// requests posted (the half-FIFO opcodes consume them) and a reply
// pending. It must not panic, must not write into a region that grants only
// remote read or only local access, and must not write outside the
// receive buffers and the remote-writable region.
func FuzzReceiveOOO(f *testing.F) {
	names, _ := filepath.Glob(filepath.Join(pcapDir, "ooo-*.pcapng"))
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		r, err := capture.NewReader(bytes.NewReader(data))
		if err != nil {
			f.Fatal(err)
		}
		var fr capture.Frame
		for r.Next(&fr) != io.EOF {
			f.Add(bytes.Clone(fr.Data))
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var pk wire.Packet
		if err := pk.DecodeWith(frame, wire.AcceptOOO); err != nil {
			return
		}
		p := newOOOPair(t)
		v := p.b
		roBuf, local := guardRegions(t, v.pd)
		// The receive buffers lie in bufB's second half; the first half is
		// where remote writes may land.
		for i := range 8 {
			must(t, v.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(p.mb, 32<<10+i*1024, 1024)}}))
		}
		pk.BTH.DestQPN = v.q.QPN()
		for _, psn := range []uint32{pk.BTH.PSN, 0, 1, 2, 63, 64} {
			pk.BTH.PSN = psn
			v.q.Receive(&pk, 2, v.out)
			v.q.Progress(3, v.out)
			v.out.committed = v.out.committed[:0]
			v.out.free = len(v.out.pool)
			// Answer a half receive read if one landed (the reply goes
			// where the request said, in the peer's memory: not here).
			for _, wc := range pollAll(v.cq) {
				if wc.Opcode == WCOOOReadRequest && wc.ByteLen <= 4096 {
					v.q.PostSend(&SendWR{ID: 9, Opcode: WROOOReadReply, SGL: []mr.SGE{sge(p.mb, 0, int(wc.ByteLen))},
						Ctx: wc.Ctx, TID: wc.TID})
				}
			}
		}
		v.q.Progress(1<<40, v.out)
		if !bytes.Equal(roBuf, make([]byte, 4096)) {
			t.Fatal("a REMOTE_READ-only region was written")
		}
		if !bytes.Equal(local, make([]byte, 4096)) {
			t.Fatal("a local-only region was written")
		}
	})
}
