package reliability

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// The hostile-peer harness: a victim device (over a hub link) with memory
// regions of every access class laid out between guard bytes, an honest
// queue pair to a second device, and, for each input, fresh target queue
// pairs (RC, UC, UD) that the fuzzed frames are retargeted to.
//
// Input format: records of [ctrl][length, 2 bytes big-endian][frame], at most
// maxRecords. ctrl bits:
const (
	ctrlRebuild  = 1 << 0 // decode (ICRC ignored), apply the bits below, re-encode: lengths, checksums, ICRC right
	ctrlQPN      = 1 << 1 // BTH.DestQPN → target[DestQPN % 3] (RC, UC, UD)
	ctrlKeys     = 1 << 2 // R_Keys (RETH, AtomicETH, IETH) → slot[rkey % slots]; VA → slot base + int32(VA)
	ctrlQKey     = 1 << 3 // DETH.QKey → the UD target's Q_Key
	ctrlAddrs    = 1 << 4 // Ethernet and IPv4 addresses → attacker to victim
	maxRecords   = 16
	maxFrameSize = hubMTU + 18
)

// PSNs of the target queue pairs: the attacker's requests start at reqPSN,
// the victim's own requests (whose responses the attacker forges) at ownPSN.
const (
	reqPSN = 0x100
	ownPSN = 0x200
	udQKey = 0x11111111
)

// The victim's remote peers (the attacker's QPNs).
const (
	attackerRC = 0xA0001
	attackerUC = 0xA0002
)

var (
	victimIP   = netip.MustParseAddr("198.51.100.2")
	attackerIP = netip.MustParseAddr("198.51.100.1")
)

// region is one area of the victim's arena.
type region struct {
	name   string
	off, n int
	access roce.Access
	secret bool // initial content must never leave the victim
	// writable: bytes the attacker may legitimately change (a region with
	// RemoteWrite/RemoteAtomic, posted receive or READ/atomic destination
	// buffers).
	writable bool
}

// Slots an attacker's R_Key (rkey % len) is retargeted to, in this order.
const (
	slotRW = iota
	slotRO
	slotWO
	slotAT
	slotNone
	slotRecv
	slotRdDst
	slotDereg
	slotHonest // registered with full access, in another PD
	nSlots
)

var arenaLayout = []region{
	slotRW:    {name: "rw", n: 4096, access: roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead | roce.RemoteAtomic, writable: true},
	slotRO:    {name: "ro", n: 1024, access: roce.RemoteRead},
	slotWO:    {name: "wo", n: 1024, access: roce.LocalWrite | roce.RemoteWrite, secret: true, writable: true},
	slotAT:    {name: "at", n: 64, access: roce.LocalWrite | roce.RemoteAtomic, writable: true},
	slotNone:  {name: "none", n: 512, access: roce.LocalWrite, secret: true},
	slotRecv:  {name: "recv", n: 1024, access: roce.LocalWrite, secret: true, writable: true}, // posted: 0..768
	slotRdDst: {name: "rddst", n: 128, access: roce.LocalWrite, secret: true, writable: true},
	slotDereg: {name: "dereg", n: 512, access: roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead | roce.RemoteAtomic, secret: true},
	// the victim's own SEND/WRITE source; not registered for remote access
	nSlots: {name: "src", n: 128, access: roce.LocalWrite},
}

const guardLen = 64

// victim is the harness. One per process (fuzz workers each have their own).
type victim struct {
	h      *hub
	v, p   *roce.Device
	arena  []byte
	init   []byte // arena content at the start of every input
	regs   []region
	guards [][2]int
	secret map[uint64]struct{} // every 8-byte window of the secret content

	pdT    *roce.PD
	slots  [nSlots]slotInfo
	srcMR  *roce.MR
	cqT    *roce.CQ
	ownMR  [nSlots + 1]*roce.MR
	rc, uc *roce.QP
	ud     *roce.QP

	// honest pair: hp on the peer device writes into hv's buffer on the victim
	hv, hp       *roce.QP
	hvBuf, hpBuf []byte
	hvMR, hpMR   *roce.MR
	hpCQ         *roce.CQ
	model        []byte
	seq          uint64

	mu         sync.Mutex // guards reqs, violations
	reqs       []reqInfo  // READ/atomic requests injected to the RC target
	violations []string
	answered   int // READ responses and atomic ACKs the victim sent
	naks       int // NAKs the victim sent
}

type slotInfo struct {
	rkey   uint32
	addr   uint64
	n      uint64
	access roce.Access
	samePD bool // in the target queue pairs' PD
	live   bool
}

// reqInfo is a READ or atomic request the attacker sent to the RC target,
// with the verdict of the permission model.
type reqInfo struct {
	psn     uint32
	npkts   uint32
	atomic  bool
	allowed bool
	desc    string
}

func newVictim(tb testing.TB) *victim {
	tb.Helper()
	vt := &victim{}
	vt.h = newHub(vt.tap)
	var err error
	if vt.v, err = roce.NewDevice(vt.h.victim, &roce.Options{Addrs: []netip.Addr{victimIP}}); err != nil {
		tb.Fatal(err)
	}
	if vt.p, err = roce.NewDevice(vt.h.peer, &roce.Options{Addrs: []netip.Addr{attackerIP}}); err != nil {
		tb.Fatal(err)
	}
	// Arena: guard | region | guard | region ... | guard.
	off := 0
	for _, r := range arenaLayout {
		if r.n == 0 { // slotHonest lives in the honest buffer, not here
			vt.regs = append(vt.regs, r)
			continue
		}
		vt.guards = append(vt.guards, [2]int{off, guardLen})
		off += guardLen
		r.off = off
		off += r.n
		vt.regs = append(vt.regs, r)
	}
	vt.guards = append(vt.guards, [2]int{off, guardLen})
	off += guardLen
	vt.arena = make([]byte, off)
	vt.init = make([]byte, off)
	if _, err := rand.Read(vt.init); err != nil {
		tb.Fatal(err)
	}
	// Secret bytes have the high bit set, readable ones not, so that the two
	// classes never share an 8-byte window by chance.
	secretAt := make([]bool, off)
	for i := range secretAt {
		secretAt[i] = true
	}
	for _, r := range vt.regs {
		for i := r.off; i < r.off+r.n; i++ {
			secretAt[i] = r.secret
		}
	}
	for i, s := range secretAt {
		if s {
			vt.init[i] |= 0x80
		} else {
			vt.init[i] &^= 0x80
		}
	}
	vt.secret = make(map[uint64]struct{})
	for i := 0; i+8 <= off; i++ {
		all := true
		for j := i; j < i+8; j++ {
			all = all && secretAt[j]
		}
		if all {
			vt.secret[binary.LittleEndian.Uint64(vt.init[i:])] = struct{}{}
		}
	}
	copy(vt.arena, vt.init)
	if vt.cqT, err = vt.v.CreateCQ(256); err != nil {
		tb.Fatal(err)
	}

	// The honest pair (QPN 0x11 on both devices, in its own PD on the victim).
	pdH := vt.v.AllocPD()
	vt.hvBuf = make([]byte, 1024)
	if vt.hvMR, err = pdH.RegMR(vt.hvBuf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic); err != nil {
		tb.Fatal(err)
	}
	vt.model = make([]byte, len(vt.hvBuf))
	hvCQ, _ := vt.v.CreateCQ(16)
	if vt.hv, err = pdH.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: hvCQ, RecvCQ: hvCQ}); err != nil {
		tb.Fatal(err)
	}
	pdP := vt.p.AllocPD()
	vt.hpBuf = make([]byte, 64)
	if vt.hpMR, err = pdP.RegMR(vt.hpBuf, roce.LocalWrite); err != nil {
		tb.Fatal(err)
	}
	vt.hpCQ, _ = vt.p.CreateCQ(16)
	if vt.hp, err = pdP.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: vt.hpCQ, RecvCQ: vt.hpCQ}); err != nil {
		tb.Fatal(err)
	}
	vt.h.honestQPN.Store(vt.hp.QPN())
	o := roce.DefaultConnectOptions()
	o.Timeout = 12
	if err := vt.hv.Connect(0x5000, roce.Endpoint{QPN: vt.hp.QPN(), PSN: 0x6000, GID: roce.GIDFromIP(attackerIP)}, &o); err != nil {
		tb.Fatal(err)
	}
	if err := vt.hp.Connect(0x6000, roce.Endpoint{QPN: vt.hv.QPN(), PSN: 0x5000, GID: roce.GIDFromIP(victimIP)}, &o); err != nil {
		tb.Fatal(err)
	}
	vt.slots[slotHonest] = slotInfo{rkey: vt.hvMR.RKey(), addr: vt.hvMR.Addr(), n: uint64(len(vt.hvBuf)),
		access: roce.RemoteWrite | roce.RemoteRead | roce.RemoteAtomic, live: true}
	vt.pdT = vt.v.AllocPD()
	// The target queue pairs live as long as the harness; each input finds
	// them freshly reset and connected (fixed QPNs keep inputs reproducible).
	mk := func(t roce.QPType) *roce.QP {
		q, err := vt.pdT.CreateQP(roce.QPConfig{Type: t, SendCQ: vt.cqT, RecvCQ: vt.cqT, MaxSendWR: 16, MaxRecvWR: 16})
		if err != nil {
			tb.Fatal(err)
		}
		return q
	}
	vt.rc, vt.uc, vt.ud = mk(roce.RC), mk(roce.UC), mk(roce.UD)
	return vt
}

func (vt *victim) close() {
	vt.v.Close()
	vt.p.Close()
}

// setup restores the arena, registers the regions afresh (a SEND with
// Invalidate may have withdrawn an R_Key) and creates the target queue pairs
// with their posted work requests.
func (vt *victim) setup(tb testing.TB) {
	tb.Helper()
	copy(vt.arena, vt.init)
	vt.mu.Lock()
	vt.reqs = vt.reqs[:0]
	vt.violations = vt.violations[:0]
	vt.mu.Unlock()
	for i, r := range vt.regs {
		if r.n == 0 {
			continue
		}
		if m := vt.ownMR[i]; m != nil && i != slotDereg {
			if err := m.Deregister(); err != nil {
				tb.Fatal(err)
			}
		}
		m, err := vt.pdT.RegMR(vt.arena[r.off:r.off+r.n], r.access)
		if err != nil {
			tb.Fatalf("register %s: %v", r.name, err)
		}
		vt.ownMR[i] = m
		if i < nSlots {
			vt.slots[i] = slotInfo{rkey: m.RKey(), addr: m.Addr(), n: uint64(r.n), access: r.access, samePD: true, live: true}
		}
		if i == slotDereg {
			if err := m.Deregister(); err != nil {
				tb.Fatal(err)
			}
			vt.slots[i].live = false
		}
	}
	vt.srcMR = vt.ownMR[nSlots]
	var err error
	o := roce.DefaultConnectOptions()
	o.Timeout, o.RetryCnt, o.RNRRetry, o.MinRNRTimer = 0, 0, 0, 1 // no timers: one input, one outcome
	gid := roce.GIDFromIP(attackerIP)
	if err = vt.rc.Connect(ownPSN, roce.Endpoint{QPN: attackerRC, PSN: reqPSN, GID: gid}, &o); err != nil {
		tb.Fatal(err)
	}
	if err = vt.uc.Connect(ownPSN, roce.Endpoint{QPN: attackerUC, PSN: reqPSN, GID: gid}, &o); err != nil {
		tb.Fatal(err)
	}
	if err = vt.ud.Activate(udQKey, ownPSN); err != nil {
		tb.Fatal(err)
	}
	recv := vt.ownMR[slotRecv]
	post := func(q *roce.QP, id uint64, off, n int) {
		if err := q.PostRecv(roce.RecvWR{ID: id, SGL: []roce.SGE{{Addr: recv.Addr() + uint64(off), Length: uint32(n), LKey: recv.LKey()}}}); err != nil {
			tb.Fatal(err)
		}
	}
	post(vt.rc, 1, 0, 128)
	post(vt.rc, 2, 128, 128)
	post(vt.uc, 3, 256, 128)
	post(vt.ud, 4, 384, 384)
	// The victim's own requests, whose responses the attacker may forge:
	// READ 64 B (PSN ownPSN), FETCH_ADD (+1), SEND 16 B (+2), WRITE 16 B (+3).
	rd := vt.ownMR[slotRdDst]
	src := roce.SGE{Addr: vt.srcMR.Addr(), Length: 16, LKey: vt.srcMR.LKey()}
	wrs := []roce.SendWR{
		{ID: 10, Opcode: qp.WRRDMARead, Flags: qp.Signaled, RemoteAddr: 0x1000, RKey: 0x1234,
			SGL: []roce.SGE{{Addr: rd.Addr(), Length: 64, LKey: rd.LKey()}}},
		{ID: 11, Opcode: qp.WRAtomicFetchAdd, Flags: qp.Signaled, RemoteAddr: 0x2000, RKey: 0x1234, CompareAdd: 1,
			SGL: []roce.SGE{{Addr: rd.Addr() + 64, Length: 8, LKey: rd.LKey()}}},
		{ID: 12, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{src}},
		{ID: 13, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, RemoteAddr: 0x3000, RKey: 0x1234, SGL: []roce.SGE{src}},
	}
	before := vt.v.Stats().TxFrames
	for _, wr := range wrs {
		if err := vt.rc.PostSend(wr); err != nil {
			tb.Fatal(err)
		}
	}
	if err := vt.uc.PostSend(roce.SendWR{ID: 14, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{src}}); err != nil {
		tb.Fatal(err)
	}
	waitCounter(tb, "victim transmits its own requests", func() uint64 { return vt.v.Stats().TxFrames }, before+5)
}

// teardown resets the target queue pairs (outstanding work requests are
// discarded) and drains their completions.
func (vt *victim) teardown(tb testing.TB) {
	tb.Helper()
	for _, q := range []*roce.QP{vt.rc, vt.uc, vt.ud} {
		if err := q.Modify(&roce.Attr{State: qp.Reset}, qp.AttrState); err != nil {
			tb.Fatal(err)
		}
	}
	var wcs [64]roce.WC
	for {
		n, err := vt.cqT.Poll(wcs[:])
		if err != nil {
			tb.Fatalf("target CQ: %v", err)
		}
		if n == 0 {
			break
		}
	}
}

// waitCounter waits until get() ≥ want (5 s at most). It yields rather than
// sleeps for the first milliseconds: timers here have a 1 ms granularity.
func waitCounter(tb testing.TB, what string, get func() uint64, want uint64) {
	tb.Helper()
	start := time.Now()
	for {
		v := get()
		if v >= want {
			return
		}
		el := time.Since(start)
		if el > 5*time.Second {
			tb.Fatalf("%s: counter %d, want %d after 5 s", what, v, want)
		}
		if el < 20*time.Millisecond {
			runtime.Gosched()
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

// slotFor returns the slot whose R_Key is rkey.
func (vt *victim) slotFor(rkey uint32) (slotInfo, bool) {
	for _, s := range vt.slots {
		if s.rkey == rkey {
			return s, true
		}
	}
	return slotInfo{}, false
}

// permitted is the permission model: may a request with this R_Key touch
// [va, va+n) with access need?
func (vt *victim) permitted(rkey uint32, va, n uint64, need roce.Access) bool {
	s, ok := vt.slotFor(rkey)
	if !ok || !s.live || !s.samePD || s.access&need == 0 {
		return false
	}
	return va >= s.addr && n <= s.n && va-s.addr <= s.n-n
}

// frames turns a fuzz input into the frames to inject, recording the READ
// and atomic requests sent to the RC target.
func (vt *victim) frames(data []byte) [][]byte {
	var out [][]byte
	var p wire.Packet
	targets := [3]uint32{vt.rc.QPN(), vt.uc.QPN(), vt.ud.QPN()}
	pmtu := uint64(vt.v.PathMTU().Bytes())
	for len(out) < maxRecords && len(data) >= 3 {
		ctrl := data[0]
		n := int(binary.BigEndian.Uint16(data[1:3]))
		data = data[3:]
		n = min(n, len(data), maxFrameSize)
		frame := data[:n]
		data = data[n:]
		if ctrl&ctrlRebuild != 0 {
			if f, ok := vt.rebuild(frame, ctrl, targets); ok {
				frame = f
			}
		}
		err := p.Decode(frame)
		if err != nil && !errors.Is(err, wire.ErrBadICRC) && p.BTH.Opcode == 0 && p.BTH.DestQPN == 0 {
			out = append(out, frame)
			continue
		}
		if p.BTH.DestQPN == vt.hv.QPN() {
			continue // the honest queue pair is not a target (RoCE has no source authentication)
		}
		out = append(out, frame)
		if err != nil || p.BTH.DestQPN != vt.rc.QPN() {
			continue
		}
		info, ok := p.BTH.Opcode.Info()
		if !ok || info.Transport != wire.RC {
			continue
		}
		switch info.Kind {
		case wire.KindReadRequest:
			l := uint64(p.RETH.DMALen)
			np := max(1, (l+pmtu-1)/pmtu)
			vt.addReq(reqInfo{psn: p.BTH.PSN, npkts: uint32(min(np, 1<<23)),
				allowed: l == 0 || vt.permitted(p.RETH.RKey, p.RETH.VA, l, roce.RemoteRead),
				desc:    fmt.Sprintf("READ psn %#x rkey %#x va %#x len %d", p.BTH.PSN, p.RETH.RKey, p.RETH.VA, l)})
		case wire.KindCompareSwap, wire.KindFetchAdd:
			vt.addReq(reqInfo{psn: p.BTH.PSN, npkts: 1, atomic: true,
				allowed: p.Atomic.VA%8 == 0 && vt.permitted(p.Atomic.RKey, p.Atomic.VA, 8, roce.RemoteAtomic),
				desc:    fmt.Sprintf("%v psn %#x rkey %#x va %#x", p.BTH.Opcode, p.BTH.PSN, p.Atomic.RKey, p.Atomic.VA)})
		}
	}
	return out
}

func (vt *victim) addReq(r reqInfo) {
	vt.mu.Lock()
	vt.reqs = append(vt.reqs, r)
	vt.mu.Unlock()
}

// rebuild decodes frame (a wrong ICRC is fine), applies the retargeting ctrl
// asks for and encodes it again.
func (vt *victim) rebuild(frame []byte, ctrl byte, targets [3]uint32) ([]byte, bool) {
	var p wire.Packet
	if err := p.Decode(frame); err != nil && !errors.Is(err, wire.ErrBadICRC) {
		return nil, false
	}
	if ctrl&ctrlQPN != 0 {
		p.BTH.DestQPN = targets[p.BTH.DestQPN%3]
	}
	if ctrl&ctrlKeys != 0 {
		key := func(rkey *uint32, va *uint64) {
			s := vt.slots[*rkey%nSlots]
			*rkey = s.rkey
			if va != nil {
				*va = s.addr + uint64(int64(int32(uint32(*va))))
			}
		}
		key(&p.RETH.RKey, &p.RETH.VA)
		key(&p.Atomic.RKey, &p.Atomic.VA)
		key(&p.IETH, nil)
	}
	if ctrl&ctrlQKey != 0 {
		p.DETH.QKey = udQKey
	}
	if ctrl&ctrlAddrs != 0 {
		copy(p.DstMAC[:], vt.v.HWAddr())
		copy(p.SrcMAC[:], vt.p.HWAddr())
		if !p.IPv6 {
			p.SrcIP, p.DstIP = attackerIP, victimIP
		}
	}
	p.BTH.TVer = 0
	buf := make([]byte, maxFrameSize+64)
	n, err := p.Encode(buf)
	if err != nil || n > maxFrameSize {
		return nil, false
	}
	return buf[:n], true
}

// tap checks every frame the victim sends towards the attacker: no 8-byte
// window of secret memory in it, and READ responses and atomic ACKs only for
// requests the permission model allows.
func (vt *victim) tap(f []byte) {
	var bad []string
	for i := 0; i+8 <= len(f); i++ {
		if _, ok := vt.secret[binary.LittleEndian.Uint64(f[i:])]; ok {
			bad = append(bad, fmt.Sprintf("frame carries secret memory at byte %d: % x", i, f))
			break
		}
	}
	var p wire.Packet
	if err := p.Decode(f); err != nil {
		bad = append(bad, fmt.Sprintf("victim sent an undecodable frame (%v): % x", err, f))
	}
	vt.mu.Lock()
	defer vt.mu.Unlock()
	if p.BTH.Opcode == wire.RCAck && p.AETH.Syndrome&0x60 == 0x60 {
		vt.naks++
	}
	switch p.BTH.Opcode {
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly,
		wire.RCAtomicAck:
		vt.answered++
		atomic := p.BTH.Opcode == wire.RCAtomicAck
		found, ok := false, false
		var descs []string
		for _, r := range vt.reqs {
			if r.atomic != atomic {
				continue
			}
			if d := wire.PSNDiff(p.BTH.PSN, r.psn); d >= 0 && uint32(d) < r.npkts {
				found = true
				ok = ok || r.allowed
				descs = append(descs, r.desc)
			}
		}
		switch {
		case !found:
			bad = append(bad, fmt.Sprintf("%v PSN %#x answers no request the attacker sent", p.BTH.Opcode, p.BTH.PSN))
		case !ok:
			bad = append(bad, fmt.Sprintf("%v PSN %#x answers a request the permission model refuses: %s",
				p.BTH.Opcode, p.BTH.PSN, strings.Join(descs, "; ")))
		}
	}
	vt.violations = append(vt.violations, bad...)
}

// checkMemory compares the arena with its initial content: only writable
// regions may differ.
func (vt *victim) checkMemory() []string {
	var bad []string
	for _, g := range vt.guards {
		if !bytes.Equal(vt.arena[g[0]:g[0]+g[1]], vt.init[g[0]:g[0]+g[1]]) {
			bad = append(bad, fmt.Sprintf("guard bytes at arena offset %d changed", g[0]))
		}
	}
	for _, r := range vt.regs {
		if r.writable || r.n == 0 {
			continue
		}
		a, b := vt.arena[r.off:r.off+r.n], vt.init[r.off:r.off+r.n]
		if i := firstDiff(a, b); i >= 0 {
			bad = append(bad, fmt.Sprintf("region %s (access %v) changed at offset %d", r.name, r.access, i))
		}
	}
	// Receive buffers only in the posted ranges; the READ destination only
	// where the victim's READ (64 B) and FETCH_ADD (8 B) land.
	rv := vt.regs[slotRecv]
	// Posted: RC 0..256, UC 256..384, UD 384..768 (40-byte GRH area + up to
	// 344 bytes of payload); 768..1024 must stay as it was.
	if i := firstDiff(vt.arena[rv.off+768:rv.off+rv.n], vt.init[rv.off+768:rv.off+rv.n]); i >= 0 {
		bad = append(bad, fmt.Sprintf("receive region changed outside the posted buffers at offset %d", 768+i))
	}
	rd := vt.regs[slotRdDst]
	if i := firstDiff(vt.arena[rd.off+72:rd.off+rd.n], vt.init[rd.off+72:rd.off+rd.n]); i >= 0 {
		bad = append(bad, fmt.Sprintf("READ destination region changed outside the posted SGEs at offset %d", 72+i))
	}
	return bad
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// honest makes the honest queue pair move a sequence-numbered 32-byte WRITE
// and checks the victim's honest buffer against the model.
func (vt *victim) honest(tb testing.TB) {
	tb.Helper()
	vt.seq++
	binary.LittleEndian.PutUint64(vt.hpBuf, vt.seq)
	for i := 8; i < 32; i++ {
		vt.hpBuf[i] = byte(vt.seq) + byte(i)
	}
	off := int(vt.seq%32) * 32
	err := vt.hp.PostSend(roce.SendWR{ID: vt.seq, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL:        []roce.SGE{{Addr: vt.hpMR.Addr(), Length: 32, LKey: vt.hpMR.LKey()}},
		RemoteAddr: vt.hvMR.Addr() + uint64(off), RKey: vt.hvMR.RKey()})
	if err != nil {
		tb.Fatalf("honest queue pair: post: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]roce.WC
	if n, err := vt.hpCQ.Wait(ctx, wc[:]); err != nil || n != 1 {
		tb.Fatalf("honest queue pair: no completion within 5 s (n=%d, %v)", n, err)
	}
	if wc[0].Status != qp.WCSuccess || wc[0].ID != vt.seq {
		tb.Fatalf("honest queue pair: completion %+v", wc[0])
	}
	copy(vt.model[off:], vt.hpBuf[:32])
	if i := firstDiff(vt.hvBuf, vt.model); i >= 0 {
		tb.Fatalf("honest buffer differs from what the honest peer wrote at offset %d", i)
	}
}

// run feeds one input to the victim and checks everything.
func (vt *victim) run(tb testing.TB, data []byte) {
	tb.Helper()
	// A hang is a failure too: crash the process with every stack, so the
	// fuzzer records the input.
	watchdog := time.AfterFunc(10*time.Second, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("hostile input: no progress for 10 s; goroutines:\n%s", buf))
	})
	defer watchdog.Stop()
	vt.setup(tb)
	frames := vt.frames(data)
	before := vt.v.Stats().RxFrames
	vt.h.inject(frames)
	waitCounter(tb, "victim receives the injected frames", func() uint64 { return vt.v.Stats().RxFrames }, before+uint64(len(frames)))
	vt.mu.Lock()
	bad := append([]string(nil), vt.violations...)
	vt.mu.Unlock()
	bad = append(bad, vt.checkMemory()...)
	vt.teardown(tb)
	if len(bad) > 0 {
		tb.Fatalf("hostile input violated the victim's guarantees:\n%s", strings.Join(bad, "\n"))
	}
	vt.honest(tb)
}

// FuzzHostileFrames feeds arbitrary frames, and frames mutated from the rxe
// captures and retargeted to the victim's queue pairs and R_Keys, to a live
// device: it must not panic, write outside a region granting the write, read
// without RemoteRead/RemoteAtomic, or stop serving its honest queue pair.
func FuzzHostileFrames(f *testing.F) {
	for _, s := range hostileSeeds(f) {
		f.Add(s)
	}
	vt := newVictim(f)
	f.Cleanup(vt.close)
	f.Fuzz(func(t *testing.T, data []byte) {
		vt.run(t, data)
	})
}

// record encodes one input record.
func record(ctrl byte, frame []byte) []byte {
	b := []byte{ctrl, byte(len(frame) >> 8), byte(len(frame))}
	return append(b, frame...)
}

const ctrlAll = ctrlRebuild | ctrlQPN | ctrlKeys | ctrlQKey | ctrlAddrs

// hostileSeeds builds the seed inputs: the RoCE frames of every rxe capture
// (alone, raw and retargeted, and in windows of consecutive frames with PSNs
// moved to the targets'), plus hand-made attacks on the victim's own
// requests and on region edges.
func hostileSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	files, err := filepath.Glob("../../testdata/rxe/*.pcap")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no rxe captures in ../../testdata/rxe (%v)", err)
	}
	sort.Strings(files)
	var seeds [][]byte
	for _, name := range files {
		frames := readRoCE(tb, name)
		// Frames retargeted one by one (the first of each opcode), and raw.
		seen := map[wire.Opcode]bool{}
		for _, fr := range frames {
			var p wire.Packet
			_ = p.Decode(fr)
			if seen[p.BTH.Opcode] {
				continue
			}
			seen[p.BTH.Opcode] = true
			seeds = append(seeds, record(ctrlAll, normalize(fr, reqPSN, ownPSN)), record(0, fr))
		}
		// Broken frames: cut short, one byte flipped (ICRC wrong), not RoCE.
		if len(frames) > 0 {
			fr := frames[0]
			flipped := append([]byte(nil), fr...)
			flipped[len(flipped)/2] ^= 0x10
			notRoCE := append([]byte(nil), fr...)
			notRoCE[14+20+2] ^= 0x01 // UDP destination port 4791 → 4790
			seeds = append(seeds, record(0, fr[:len(fr)/2]), record(0, flipped), record(0, notRoCE))
		}
		// Windows of up to 8 consecutive frames, PSNs rebased.
		for start := 0; start < len(frames) && start < 48; start += 8 {
			end := min(start+8, len(frames))
			var in []byte
			var rq, rs uint32
			for i, fr := range frames[start:end] {
				var p wire.Packet
				_ = p.Decode(fr)
				info, _ := p.BTH.Opcode.Info()
				if i == 0 || rq == 0 {
					if info.Request {
						rq = p.BTH.PSN
					}
				}
				if rs == 0 && !info.Request {
					rs = p.BTH.PSN
				}
				base := rq
				to := uint32(reqPSN)
				if !info.Request {
					base, to = rs, ownPSN
				}
				in = append(in, record(ctrlAll, rebasePSN(fr, base, to))...)
			}
			seeds = append(seeds, in)
		}
	}
	return append(seeds, handSeeds()...)
}

// readRoCE returns the RoCE frames (whatever their ICRC) of a capture.
func readRoCE(tb testing.TB, name string) [][]byte {
	tb.Helper()
	fh, err := os.Open(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer fh.Close()
	r, err := capture.NewReader(fh)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	var out [][]byte
	var fr capture.Frame
	var p wire.Packet
	for {
		if err := r.Next(&fr); err != nil {
			break
		}
		if err := p.Decode(fr.Data); err != nil && !errors.Is(err, wire.ErrBadICRC) {
			continue
		}
		out = append(out, append([]byte(nil), fr.Data...))
	}
	return out
}

// normalize moves a captured frame's PSN to reqPSN (requests) or ownPSN
// (responses) and its R_Keys to slot 0 at offset 0, so that, retargeted, it
// reaches the targets' execution paths.
func normalize(fr []byte, req, resp uint32) []byte {
	var p wire.Packet
	_ = p.Decode(fr)
	info, _ := p.BTH.Opcode.Info()
	to := resp
	if info.Request {
		to = req
	}
	return rebasePSN(fr, p.BTH.PSN, to)
}

// rebasePSN re-encodes fr with PSN − base + to, R_Keys 0 (slot rw) and VAs
// at the same offset from the slot base modulo 2 KiB.
func rebasePSN(fr []byte, base, to uint32) []byte {
	var p wire.Packet
	if err := p.Decode(fr); err != nil && !errors.Is(err, wire.ErrBadICRC) {
		return fr
	}
	p.BTH.PSN = wire.PSNAdd(to, uint32(wire.PSNDiff(p.BTH.PSN, base))&wire.PSNMask)
	p.RETH.RKey, p.RETH.VA = slotRW, p.RETH.VA%2048
	p.Atomic.RKey, p.Atomic.VA = slotRW, p.Atomic.VA%2048&^7
	p.IETH = slotRW
	if p.RETH.DMALen > 4096 {
		p.RETH.DMALen = 4096
	}
	buf := make([]byte, len(fr)+64)
	n, err := p.Encode(buf)
	if err != nil {
		return fr
	}
	return buf[:n]
}

// handSeeds are attacks written out: forged responses to the victim's own
// requests (too long, wrong PSN), writes and reads at region edges, atomics
// on the wrong regions.
func handSeeds() [][]byte {
	base := wire.Packet{
		SrcIP: attackerIP, DstIP: victimIP, TTL: 64, SrcPort: 0xC000, DstPort: wire.UDPPort,
		BTH: wire.BTH{PKey: 0xFFFF},
	}
	mk := func(op wire.Opcode, qpnSel uint32, psn uint32, mod func(p *wire.Packet)) []byte {
		p := base
		p.BTH.Opcode, p.BTH.DestQPN, p.BTH.PSN, p.BTH.AckReq = op, qpnSel, psn, true
		if mod != nil {
			mod(&p)
		}
		buf := make([]byte, maxFrameSize+64)
		n, err := p.Encode(buf)
		if err != nil {
			panic(fmt.Sprintf("hand seed %v: %v", op, err))
		}
		return record(ctrlAll, buf[:n])
	}
	pay := func(n int) []byte { return bytes.Repeat([]byte{0x5A}, n) }
	rdma := func(slot uint32, off int32, n uint32, payload int) func(*wire.Packet) {
		return func(p *wire.Packet) {
			p.RETH = wire.RETH{RKey: slot, VA: uint64(uint32(off)), DMALen: n}
			if payload > 0 {
				p.Payload = pay(payload)
			}
		}
	}
	atom := func(slot uint32, off int32) func(*wire.Packet) {
		return func(p *wire.Packet) { p.Atomic = wire.AtomicETH{RKey: slot, VA: uint64(uint32(off)), SwapAdd: 1} }
	}
	ack := func(p *wire.Packet) { p.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), MSN: 1} }
	var s [][]byte
	join := func(rs ...[]byte) { s = append(s, bytes.Join(rs, nil)) }
	// Responses to the victim's READ (64 B at ownPSN) and FETCH_ADD.
	join(mk(wire.RCReadResponseOnly, 0, ownPSN, func(p *wire.Packet) { ack(p); p.Payload = pay(64) }),
		mk(wire.RCAtomicAck, 0, ownPSN+1, func(p *wire.Packet) { ack(p); p.AtomicAck.Orig = 7 }),
		mk(wire.RCAck, 0, ownPSN+3, ack))
	join(mk(wire.RCReadResponseOnly, 0, ownPSN, func(p *wire.Packet) { ack(p); p.Payload = pay(1024) }))
	join(mk(wire.RCReadResponseFirst, 0, ownPSN, func(p *wire.Packet) { ack(p); p.Payload = pay(1024) }),
		mk(wire.RCReadResponseLast, 0, ownPSN+1, func(p *wire.Packet) { ack(p); p.Payload = pay(8) }))
	join(mk(wire.RCAck, 0, ownPSN+9, ack))
	// WRITEs at and past region edges, to every slot.
	for slot := uint32(0); slot < nSlots; slot++ {
		join(mk(wire.RCWriteOnly, 0, reqPSN, rdma(slot, 0, 16, 16)))
		join(mk(wire.RCWriteOnly, 0, reqPSN, rdma(slot, -1, 2, 2)))
		join(mk(wire.RCReadRequest, 0, reqPSN, rdma(slot, 0, 32, 0)))
		join(mk(wire.RCFetchAdd, 0, reqPSN, atom(slot, 0)))
	}
	join(mk(wire.RCWriteOnly, 0, reqPSN, rdma(slotRW, 4095, 2, 2)))
	join(mk(wire.RCReadRequest, 0, reqPSN, rdma(slotRO, 1000, 25, 0)))
	join(mk(wire.RCReadRequest, 0, reqPSN, rdma(slotRW, 0, 4096, 0)))
	join(mk(wire.RCFetchAdd, 0, reqPSN, atom(slotAT, 60)))
	join(mk(wire.RCCompareSwap, 0, reqPSN, atom(slotAT, 4)))
	// A WRITE FIRST inside the region, then a LAST that runs past it.
	join(mk(wire.RCWriteFirst, 0, reqPSN, rdma(slotRW, 3000, 2048, 1024)),
		mk(wire.RCWriteLast, 0, reqPSN+1, func(p *wire.Packet) { p.Payload = pay(1024) }))
	// SEND longer than the receive buffer; SEND with Invalidate of rw then a
	// WRITE with the invalidated key.
	join(mk(wire.RCSendFirst, 0, reqPSN, func(p *wire.Packet) { p.Payload = pay(1024) }),
		mk(wire.RCSendLast, 0, reqPSN+1, func(p *wire.Packet) { p.Payload = pay(100) }))
	join(mk(wire.RCSendOnlyInv, 0, reqPSN, func(p *wire.Packet) { p.IETH = slotRW; p.Payload = pay(8) }),
		mk(wire.RCWriteOnly, 0, reqPSN+1, rdma(slotRW, 0, 8, 8)))
	// UC and UD.
	join(mk(wire.UCWriteOnly, 1, reqPSN, rdma(slotRO, 0, 8, 8)))
	join(mk(wire.UCSendOnly, 1, reqPSN, func(p *wire.Packet) { p.Payload = pay(200) }))
	join(mk(wire.UDSendOnly, 2, reqPSN, func(p *wire.Packet) { p.DETH = wire.DETH{QKey: udQKey, SrcQPN: 5}; p.Payload = pay(400) }))
	// Duplicate READ with a new, forbidden R_Key at the PSN of an allowed one.
	join(mk(wire.RCReadRequest, 0, reqPSN, rdma(slotRW, 0, 32, 0)),
		mk(wire.RCReadRequest, 0, reqPSN, rdma(slotNone, 0, 32, 0)))
	return s
}

// TestHostileSeedsReachDeepCode: the seeds are worth their name: the victim
// executes some of the attacker's operations (WRITEs land, READs are
// answered) and refuses others with NAKs, and the harness's own checks catch
// a planted fault (guard bytes changed behind the engine's back).
func TestHostileSeedsReachDeepCode(t *testing.T) {
	vt := newVictim(t)
	t.Cleanup(vt.close)
	var allowed, refused, answered, naks int
	seeds := hostileSeeds(t)
	start := time.Now()
	for _, s := range seeds {
		vt.run(t, s)
		vt.mu.Lock()
		for _, r := range vt.reqs {
			if r.allowed {
				allowed++
			} else {
				refused++
			}
		}
		answered += vt.answered
		naks += vt.naks
		vt.answered, vt.naks = 0, 0
		vt.mu.Unlock()
	}
	el := time.Since(start)
	st := vt.v.Stats()
	t.Logf("%d seeds in %v (%v each): READ/atomic requests allowed %d, refused %d; answered %d; NAKs %d",
		len(seeds), el.Round(time.Millisecond), (el / time.Duration(len(seeds))).Round(time.Microsecond), allowed, refused, answered, naks)
	t.Logf("victim: %+v", st)
	if allowed == 0 || answered == 0 || refused == 0 || naks == 0 {
		t.Error("the seeds do not reach both the execution and the refusal paths")
	}
	if st.DropMalformed == 0 || st.DropUnknownQPN == 0 || st.DropBadICRC == 0 || st.DropNotRoCE == 0 {
		t.Errorf("seeds reach neither the decoder's nor the demultiplexer's refusals: %+v", st)
	}
	// The checker must be able to fail: change a guard byte and a read-only
	// region byte and expect both to be reported.
	vt.setup(t)
	vt.arena[vt.guards[1][0]] ^= 1
	vt.arena[vt.regs[slotRO].off+3] ^= 1
	bad := vt.checkMemory()
	vt.teardown(t)
	if len(bad) != 2 {
		t.Errorf("planted faults: checker reported %q, want 2 reports", bad)
	}
	copy(vt.arena, vt.init)
	// And a frame carrying secret bytes is caught by the tap.
	vt.mu.Lock()
	n := len(vt.violations)
	vt.mu.Unlock()
	off := vt.regs[slotNone].off
	vt.tap(append(make([]byte, 60), vt.init[off:off+16]...))
	vt.mu.Lock()
	got := len(vt.violations) - n
	vt.mu.Unlock()
	if got == 0 {
		t.Error("the tap missed a frame with secret memory in it")
	}
}

// TestHostileReadFlood: an attacker sends 200 READ requests (and then 200
// FETCH_ADDs) at once, far beyond max_dest_rd_atomic (16): the responder
// keeps max_dest_rd_atomic READ/atomic resources; a request that finds
// all of them still waiting to transmit is an invalid request (class C): the
// responses queued before it go out, then one NAK, and the attacker's queue
// pair goes to Error. It reads only what it may, and the honest queue pair
// keeps working.
func TestHostileReadFlood(t *testing.T) {
	vt := newVictim(t)
	t.Cleanup(vt.close)
	base := wire.Packet{
		SrcIP: attackerIP, DstIP: victimIP, TTL: 64, SrcPort: 0xC000, DstPort: wire.UDPPort,
		BTH: wire.BTH{PKey: 0xFFFF},
	}
	for _, atomic := range []bool{false, true} {
		var in []byte
		for i := range 200 {
			p := base
			p.BTH.DestQPN, p.BTH.PSN = 0, reqPSN+uint32(i)
			if atomic {
				p.BTH.Opcode = wire.RCFetchAdd
				p.Atomic = wire.AtomicETH{RKey: slotRW, VA: uint64(8 * (i % 64)), SwapAdd: 1}
			} else {
				p.BTH.Opcode = wire.RCReadRequest
				p.RETH = wire.RETH{RKey: slotRO, VA: uint64(i % 512), DMALen: 256}
			}
			buf := make([]byte, maxFrameSize)
			n, err := p.Encode(buf)
			if err != nil {
				t.Fatal(err)
			}
			in = append(in, record(ctrlAll, buf[:n])...)
		}
		// One input carries at most maxRecords frames: feed them through
		// the harness's pieces directly.
		vt.setup(t)
		var frames [][]byte
		for rest := in; len(rest) > 0; {
			n := 3 + int(binary.BigEndian.Uint16(rest[1:3]))
			frames = append(frames, vt.frames(rest[:n])...)
			rest = rest[n:]
		}
		before := vt.v.Stats().RxFrames
		vt.h.inject(frames)
		waitCounter(t, "victim receives the flood", func() uint64 { return vt.v.Stats().RxFrames }, before+uint64(len(frames)))
		vt.mu.Lock()
		bad := append([]string(nil), vt.violations...)
		answered, naks := vt.answered, vt.naks
		vt.answered, vt.naks = 0, 0
		vt.mu.Unlock()
		bad = append(bad, vt.checkMemory()...)
		vt.teardown(t)
		if len(bad) > 0 {
			t.Fatalf("flood violated the victim's guarantees:\n%s", strings.Join(bad, "\n"))
		}
		vt.honest(t)
		t.Logf("atomic=%v: 200 requests in one burst, %d answered, %d NAKs; victim %+v", atomic, answered, naks, vt.v.Stats())
		// Requests whose slot's response already went out cannot be told
		// from an honest requester's (rxe answers every one): at least
		// max_dest_rd_atomic are answered, and unless all were, the
		// excess one is NAKed once.
		if dest := int(roce.DefaultConnectOptions().MaxDestRdAtomic); answered < dest || answered > 200 {
			t.Errorf("atomic=%v: %d of 200 requests answered, want %d..200", atomic, answered, dest)
		}
		if answered < 200 && naks != 1 {
			t.Errorf("atomic=%v: %d NAKs after %d of 200 requests answered, want 1", atomic, naks, answered)
		}
	}
}
