package lmrm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/lmrm"
	"github.com/xdproce/xdproce/roce"
)

// fill reserves and writes until Reserve fails, returning the slots written
// and the error.
func fill(t *testing.T, pr *pair) (int, error) {
	t.Helper()
	for n := 0; ; n++ {
		s, err := pr.r.Reserve()
		if err != nil {
			return n, err
		}
		if err := pr.r.Write(s, []byte{byte(n)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExhausted: without Grow, the fifth Reserve on a pool of four slots
// whose batch is never full returns ErrExhausted and sends nothing; after
// the provider's release the slots are reserved again.
func TestExhausted(t *testing.T) {
	pr := newPair(t, lmrm.Config{}, &lmrm.ProviderConfig{Batch: 8})
	pr.alloc(t, 4*64, 64)
	n, err := fill(t, pr)
	if n != 4 || !errors.Is(err, lmrm.ErrExhausted) {
		t.Fatalf("%d slots reserved, then %v; want 4 then ErrExhausted", n, err)
	}
	pr.until(t, "four delivered", func() bool { pr.mu.Lock(); defer pr.mu.Unlock(); return len(pr.got) == 4 })
	if _, err := pr.r.Reserve(); !errors.Is(err, lmrm.ErrExhausted) {
		t.Fatalf("Reserve before any release: %v, want ErrExhausted", err)
	}
	if err := pr.p.Flush(); err != nil {
		t.Fatal(err)
	}
	pr.until(t, "slots released", func() bool { return pr.r.Stats().Free == 4 })
	if n, err := fill(t, pr); n != 4 || !errors.Is(err, lmrm.ErrExhausted) {
		t.Fatalf("after the release: %d slots, then %v; want 4 then ErrExhausted", n, err)
	}
	c := count(pr.frames(t))
	if c["out RC_SEND_ONLY LMRM_ALLOC"] != 1 || c["in RC_SEND_ONLY LMRM_RELEASE"] != 1 {
		t.Errorf("frames %v: want one LMRM_ALLOC and one LMRM_RELEASE", c)
	}
}

// TestGrow: with Grow, exhaustion sends exactly one more LMRM_ALLOC (Reserve
// says ErrPending meanwhile), its pool adds four slots, and the next
// exhaustion is ErrExhausted with no third LMRM_ALLOC.
func TestGrow(t *testing.T) {
	pr := newPair(t, lmrm.Config{Grow: true}, &lmrm.ProviderConfig{Batch: 8})
	pr.alloc(t, 4*64, 64)
	n, err := fill(t, pr)
	if n != 4 || !errors.Is(err, lmrm.ErrPending) {
		t.Fatalf("%d slots reserved, then %v; want 4 then ErrPending", n, err)
	}
	if _, err := pr.r.Reserve(); !errors.Is(err, lmrm.ErrPending) {
		t.Fatalf("second Reserve while growing: %v, want ErrPending", err)
	}
	pr.until(t, "second pool", func() bool { return pr.r.Stats().Pools == 2 })
	n, err = fill(t, pr)
	if n != 4 || !errors.Is(err, lmrm.ErrExhausted) {
		t.Fatalf("after growing: %d slots, then %v; want 4 then ErrExhausted", n, err)
	}
	pr.until(t, "eight delivered", func() bool { pr.mu.Lock(); defer pr.mu.Unlock(); return len(pr.got) == 8 })
	if st := pr.p.Stats(); st.Pools != 2 || st.RegisteredBytes != 2*4*64 {
		t.Errorf("provider %+v, want two pools of 256 B", st)
	}
	c := count(pr.frames(t))
	if c["out RC_SEND_ONLY LMRM_ALLOC"] != 2 || c["in RC_SEND_ONLY LMRM_ALLOC_ACK"] != 2 {
		t.Errorf("frames %v: want exactly two LMRM_ALLOC and two LMRM_ALLOC_ACK", c)
	}
}

// failing steps the requester alone until Progress fails.
func failing(t *testing.T, pr *pair) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := pr.r.Progress(); err != nil {
			return err
		}
		time.Sleep(10 * time.Microsecond)
	}
	t.Fatal("requester's Progress did not fail within 10 s")
	return nil
}

// reservedSlot makes a pair with a provider, a pool of 4 slots of 64 B and
// one slot reserved.
func reservedSlot(t *testing.T) (*pair, lmrm.Slot) {
	t.Helper()
	pr := newPair(t, lmrm.Config{}, &lmrm.ProviderConfig{})
	pr.alloc(t, 4*64, 64)
	s, err := pr.r.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	return pr, s
}

// TestRevokeWrite: a write into a pool the provider revoked (and
// deregistered) after the requester reserved the slot completes with a
// remote access error; the requester reports ErrRevoked from then on.
func TestRevokeWrite(t *testing.T) {
	pr, s := reservedSlot(t)
	if err := pr.p.Revoke(0); err != nil {
		t.Fatal(err)
	}
	if st := pr.p.Stats(); st.RegisteredBytes != 0 || st.Pools != 0 {
		t.Errorf("provider after revoke %+v, want nothing registered", st)
	}
	if err := pr.r.Write(s, []byte("late")); err != nil {
		t.Fatal(err)
	}
	err := failing(t, pr)
	if !errors.Is(err, lmrm.ErrRevoked) || !strings.Contains(err.Error(), roce.WCRemAccessErr.String()) {
		t.Fatalf("requester: %v, want ErrRevoked with %v", err, roce.WCRemAccessErr)
	}
	if _, err := pr.r.Reserve(); !errors.Is(err, lmrm.ErrRevoked) {
		t.Fatalf("Reserve after the failed write: %v, want ErrRevoked", err)
	}
	if len(pr.got) != 0 {
		t.Fatalf("the provider delivered %d messages after revoking", len(pr.got))
	}
}

// TestRevokeMessage: once the requester has seen LMRM_REVOKE, Reserve and
// Write on the pool fail with ErrRevoked and nothing more is written.
func TestRevokeMessage(t *testing.T) {
	pr := newPair(t, lmrm.Config{}, &lmrm.ProviderConfig{})
	pr.alloc(t, 4*64, 64)
	s, err := pr.r.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.p.Revoke(0); err != nil {
		t.Fatal(err)
	}
	pr.until(t, "revoke seen", func() bool { _, err := pr.r.Reserve(); return errors.Is(err, lmrm.ErrRevoked) })
	if err := pr.r.Write(s, []byte("x")); !errors.Is(err, lmrm.ErrRevoked) {
		t.Fatalf("Write into the revoked pool: %v, want ErrRevoked", err)
	}
	if c := count(pr.frames(t)); c["out RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"] != 0 || c["in RC_SEND_ONLY LMRM_REVOKE"] != 1 {
		t.Errorf("frames %v: want one LMRM_REVOKE and no write", c)
	}
}

// hostile is a provider the test plays on pr.qb: it takes the requester's
// LMRM_ALLOCs and answers with whatever the test says.
type hostile struct {
	t    *testing.T
	pr   *pair
	rbuf *roce.MR
	sbuf *roce.MR
	mem  *roce.MR // a region the answers may name
}

func newHostile(t *testing.T) *hostile {
	pr := newPair(t, lmrm.Config{}, nil)
	h := &hostile{t: t, pr: pr}
	var err error
	if h.rbuf, err = pr.pdb.RegMR(make([]byte, 4*lmrm.MaxMsg), roce.LocalWrite); err != nil {
		t.Fatal(err)
	}
	if h.sbuf, err = pr.pdb.RegMR(make([]byte, lmrm.MaxMsg), 0); err != nil {
		t.Fatal(err)
	}
	if h.mem, err = pr.pdb.RegMR(make([]byte, 4096), roce.LocalWrite|roce.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := pr.qb.PostRecv(roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{{Addr: h.rbuf.Addr() + uint64(i*lmrm.MaxMsg), Length: lmrm.MaxMsg, LKey: h.rbuf.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// answer sends m after the requester's LMRM_ALLOC came.
func (h *hostile) answer(m *lmrm.Msg) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]roce.WC, 1)
	if n, err := h.pr.cqb.Wait(ctx, wcs); err != nil || n != 1 || wcs[0].Status != roce.WCSuccess || wcs[0].Opcode != roce.WCRecv {
		h.t.Fatalf("hostile provider: no LMRM_ALLOC (%d completions, %v, %+v)", n, err, wcs[0])
	}
	b := lmrm.Append(h.sbuf.Bytes()[:0], m)
	if err := h.pr.qb.PostSend(roce.SendWR{ID: 9, Opcode: roce.WRSend, Flags: roce.Signaled,
		SGL: []roce.SGE{{Addr: h.sbuf.Addr(), Length: uint32(len(b)), LKey: h.sbuf.LKey()}}}); err != nil {
		h.t.Fatal(err)
	}
	if n, err := h.pr.cqb.Wait(ctx, wcs); err != nil || n != 1 || wcs[0].Status != roce.WCSuccess {
		h.t.Fatalf("hostile provider's send: %d completions, %v, %v", n, err, wcs[0].Status)
	}
}

// TestHostileProvider: answers the requester must not accept fail it with
// an error that says what was wrong.
func TestHostileProvider(t *testing.T) {
	ack := func(h *hostile, f func(*lmrm.Msg)) *lmrm.Msg {
		m := &lmrm.Msg{Kind: lmrm.KAllocAck, Addr: h.mem.Addr(), RKey: h.mem.RKey(), SlotSize: 64, Count: 4}
		f(m)
		return m
	}
	for _, c := range []struct {
		name string
		msgs []func(*lmrm.Msg)
		want string
	}{
		{"count 0", []func(*lmrm.Msg){func(m *lmrm.Msg) { m.Count = 0 }}, "grants 0 slots"},
		{"small slots", []func(*lmrm.Msg){func(m *lmrm.Msg) { m.SlotSize, m.Count = 32, 8 }}, "slot of 32 B, asked for at least 64"},
		{"short range", []func(*lmrm.Msg){func(m *lmrm.Msg) { m.Count = 2 }}, "range of 128 B for 256 B asked"},
		{"wrapping", []func(*lmrm.Msg){func(m *lmrm.Msg) { m.Addr = ^uint64(0) - 100 }}, "wraps"},
		{"rkey 0", []func(*lmrm.Msg){func(m *lmrm.Msg) { m.RKey = 0 }}, "rkey 0"},
		{"wrong pool", []func(*lmrm.Msg){func(m *lmrm.Msg) { m.Pool = 3 }}, "names pool 3, want 0"},
		{"refused", []func(*lmrm.Msg){func(m *lmrm.Msg) { m.Status = lmrm.AckRefused }}, "provider refused 256 B"},
		{"overlapping", []func(*lmrm.Msg){func(*lmrm.Msg) {}, func(m *lmrm.Msg) { m.Pool, m.Addr = 1, m.Addr+64 }}, "overlaps pool 0"},
		{"release of a free slot", []func(*lmrm.Msg){func(*lmrm.Msg) {}, func(m *lmrm.Msg) { *m = lmrm.Msg{Kind: lmrm.KRelease, Slots: []uint32{2}} }}, "slot 2, which is not in flight"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHostile(t)
			for i, f := range c.msgs {
				m := ack(h, f)
				if m.Kind == lmrm.KAllocAck {
					if err := h.pr.r.Alloc(4*64, 64); err != nil {
						t.Fatal(err)
					}
					h.answer(m)
				} else {
					h.sendOnly(m)
				}
				if i < len(c.msgs)-1 {
					h.pr.until(t, "first pool", func() bool { return h.pr.r.Stats().Pools == i+1 })
				}
			}
			err := failing(t, h.pr)
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("requester: %v, want %q", err, c.want)
			}
			if c.name != "refused" && !errors.Is(err, lmrm.ErrProtocol) {
				t.Errorf("%v is not ErrProtocol", err)
			}
		})
	}
}

// TestHostileWrongRKey: an answer with an rkey the provider never
// registered is accepted (the requester cannot tell), and the first write
// fails with a remote access error naming pool and slot.
func TestHostileWrongRKey(t *testing.T) {
	h := newHostile(t)
	if err := h.pr.r.Alloc(4*64, 64); err != nil {
		t.Fatal(err)
	}
	h.answer(&lmrm.Msg{Kind: lmrm.KAllocAck, Addr: h.mem.Addr(), RKey: h.mem.RKey() ^ 0x5500, SlotSize: 64, Count: 4})
	h.pr.until(t, "pool", func() bool { return h.pr.r.Stats().Pools == 1 })
	s, err := h.pr.r.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.pr.r.Write(s, []byte("data")); err != nil {
		t.Fatal(err)
	}
	err = failing(t, h.pr)
	if !strings.Contains(err.Error(), "write into pool 0 slot 0 completed with "+roce.WCRemAccessErr.String()) {
		t.Fatalf("requester: %v", err)
	}
}

// sendOnly sends m without waiting for a request.
func (h *hostile) sendOnly(m *lmrm.Msg) {
	h.t.Helper()
	b := lmrm.Append(h.sbuf.Bytes()[:0], m)
	if err := h.pr.qb.PostSend(roce.SendWR{ID: 9, Opcode: roce.WRSend, SGL: []roce.SGE{{Addr: h.sbuf.Addr(), Length: uint32(len(b)), LKey: h.sbuf.LKey()}}}); err != nil {
		h.t.Fatal(err)
	}
}

// TestHostileRequester: a second write into a slot the provider delivered
// and has not released yet fails the provider with ErrProtocol, and its
// data is not delivered.
func TestHostileRequester(t *testing.T) {
	pr := newPair(t, lmrm.Config{}, &lmrm.ProviderConfig{Batch: 8})
	pr.alloc(t, 4*64, 64)
	s, err := pr.r.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.r.Write(s, []byte("first")); err != nil {
		t.Fatal(err)
	}
	pr.until(t, "first delivered", func() bool { pr.mu.Lock(); defer pr.mu.Unlock(); return len(pr.got) == 1 })
	addr, rkey := pr.r.PoolKeys(0)
	src, err := pr.pda.RegMR([]byte("again"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.qa.PostSend(roce.SendWR{Opcode: roce.WRRDMAWriteImm, SGL: []roce.SGE{{Addr: src.Addr(), Length: 5, LKey: src.LKey()}},
		Imm: lmrm.Imm(0, s.Index), RemoteAddr: addr + uint64(s.Index)*64, RKey: rkey}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := pr.p.Progress()
		if err != nil {
			if !errors.Is(err, lmrm.ErrProtocol) || !strings.Contains(err.Error(), "slot 0 written again before its release") {
				t.Fatalf("provider: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the provider accepted a second write into an unreleased slot")
		}
		time.Sleep(10 * time.Microsecond)
	}
	if len(pr.got) != 1 {
		t.Fatalf("%d messages delivered, want 1", len(pr.got))
	}
}

// TestWriteRetryExceeded: a write that no one answers (the provider's queue
// pair destroyed after the grant: its device drops the frames) completes
// with RETRY_EXC_ERR once the retries run out; the requester fails with that
// status, not ErrRevoked (the provider revoked nothing).
func TestWriteRetryExceeded(t *testing.T) {
	pr, s := reservedSlot(t)
	if err := pr.qb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := pr.r.Write(s, []byte("unanswered")); err != nil {
		t.Fatal(err)
	}
	err := failing(t, pr)
	if errors.Is(err, lmrm.ErrRevoked) || !strings.Contains(err.Error(), roce.WCRetryExcErr.String()) {
		t.Fatalf("requester: %v, want %v without ErrRevoked", err, roce.WCRetryExcErr)
	}
	if _, err := pr.r.Reserve(); err == nil || errors.Is(err, lmrm.ErrRevoked) {
		t.Fatalf("Reserve after the failed write: %v, want the write's failure", err)
	}
}
