package qp

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
)

// TestLocalOpsInSendQueue: binds and local invalidations between WRITEs
// complete in send-queue order with the right opcodes, on RC (also lossy:
// go-back-N rewinds over the executed local requests, and with selective
// repeat) and UC, and leave the window as the last one said.
func TestLocalOpsInSendQueue(t *testing.T) {
	lossy := defaultOpts()
	lossy.f = faults{loss: 0.2, seed: 3}
	sr := lossy
	sr.sr = true
	uc := defaultOpts()
	uc.typ = UC
	for name, o := range map[string]pairOpts{"RC": defaultOpts(), "RC lossy": lossy, "RC SR lossy": sr, "UC": uc} {
		t.Run(name, func(t *testing.T) {
			p := newPair(t, o)
			am, abuf := p.a.reg(t, 1<<16, allAcc|mr.MWBind)
			bm, bbuf := p.b.reg(t, 1<<16, allAcc)
			fill(abuf, 9)
			w, err := p.a.pd.AllocMW(mr.MWType2B)
			if err != nil {
				t.Fatal(err)
			}
			k1 := mr.IncRKey(w.RKey())
			k2 := mr.IncRKey(k1)
			bind := func(k uint32, off uint64) BindWR {
				return BindWR{MW: w, RKey: k, Info: mr.BindInfo{MR: am, Addr: am.Addr() + off, Length: 64, Access: mr.RemoteRead}}
			}
			write := func(id uint64, off int) *SendWR {
				return &SendWR{ID: id, Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(am, off, 3000)},
					RemoteAddr: bm.Addr() + uint64(off), RKey: bm.RKey()}
			}
			wrs := []*SendWR{write(1, 0),
				{ID: 2, Opcode: WRBindMW, Flags: Signaled, Bind: bind(k1, 0)},
				write(3, 3000),
				{ID: 4, Opcode: WRLocalInv, Flags: Signaled, InvRKey: k1},
				{ID: 5, Opcode: WRBindMW, Bind: bind(k2, 128)}, // unsignaled
				write(6, 6000)}
			for _, wr := range wrs {
				must(t, p.a.q.PostSend(wr))
			}
			got := p.poll(p.a, 5)
			want := []struct {
				id uint64
				op WCOpcode
			}{{1, WCRDMAWrite}, {2, WCBindMW}, {3, WCRDMAWrite}, {4, WCLocalInv}, {6, WCRDMAWrite}}
			for i, wc := range got {
				if wc.ID != want[i].id || wc.Opcode != want[i].op || wc.Status != WCSuccess {
					t.Fatalf("completion %d: %+v, want id %d %v success (all: %s)", i, wc, want[i].id, want[i].op, fmt.Sprint(got))
				}
			}
			if o.f.loss > 0 && p.a.q.Stats().Get(CtrRetransmits) == 0 {
				t.Fatal("no retransmission: the loss did not exercise the rewind")
			}
			if !bytes.Equal(bbuf[:9000], abuf[:9000]) {
				t.Fatal("WRITE data differs")
			}
			if w.RKey() != k2 || !w.Bound() {
				t.Fatalf("window rkey %#x bound %v, want %#x bound", w.RKey(), w.Bound(), k2)
			}
			if _, err := p.a.tbl.Remote(p.a.pd, p.a.q, k2, am.Addr()+128, 64, mr.RemoteRead); err != nil {
				t.Fatalf("the last bind: %v", err)
			}
			if _, err := p.a.tbl.Remote(p.a.pd, p.b.q, k2, am.Addr()+128, 64, mr.RemoteRead); err == nil {
				t.Fatal("a type 2B window answers another queue pair")
			}
		})
	}
}

// TestLocalOpRefusedOnUD: local work requests need a connected queue pair.
func TestLocalOpRefusedOnUD(t *testing.T) {
	o := defaultOpts()
	o.typ = UD
	o.noConnect = true
	p := newPair(t, o)
	if err := p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRLocalInv, InvRKey: 5}); err == nil {
		t.Fatal("IBV_WR_LOCAL_INV posted on a UD queue pair")
	}
}
