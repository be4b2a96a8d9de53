package mcast

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// RecvConfig configures a Member.
type RecvConfig struct {
	Dev       *roce.Device
	Iface     *net.Interface
	Group     netip.Addr
	Port      int // control port (0: DefaultPort)
	PSK       []byte
	Dir       string // where files land
	MaxSize   int64  // the largest file taken (0: 1 GiB)
	Overwrite bool   // replace an existing file of the same name
	// Idle ends a transfer whose sender has sent nothing for this long (0:
	// 30 s).
	Idle time.Duration
	Log  *slog.Logger
}

// Received is one file's outcome at a member.
type Received struct {
	Name   string
	Path   string // where it was written ("" unless OK)
	Size   int64
	SHA256 string
	From   netip.Addr // the sender's control address
	OK     bool
	Error  string
}

// A Member takes files multicast to its group: the device joined the group,
// announcing itself on the group's control port until a sender offers one.
type Member struct {
	cfg   RecvConfig
	local netip.Addr
	uc    *net.UDPConn
	leave func() error
	ctl
	group *net.UDPAddr
	last  *msg // the result of the last transfer, for a repeated done
	lastS uint64
}

// NewMember joins the group on the device and opens the control socket.
func NewMember(cfg RecvConfig) (*Member, error) {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = 1 << 30
	}
	if cfg.Idle == 0 {
		cfg.Idle = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := CheckDest(cfg.Group, cfg.Iface); err != nil {
		return nil, err
	}
	mb := &Member{cfg: cfg, ctl: ctl{key: cfg.PSK, log: cfg.Log, in: make(chan packet, 64)},
		group: net.UDPAddrFromAddrPort(netip.AddrPortFrom(cfg.Group, uint16(cfg.Port)))}
	var err error
	if mb.local, err = localAddr(cfg.Iface, cfg.Group); err != nil {
		return nil, err
	}
	if mb.leave, err = cfg.Dev.JoinGroup(cfg.Group); err != nil {
		return nil, fmt.Errorf("mcast: %w", err)
	}
	if mb.uc, err = dialUnicast(mb.local, cfg.Iface); err != nil {
		mb.leave()
		return nil, err
	}
	go mb.read(mb.uc)
	return mb, nil
}

// Close leaves the group and closes the control socket.
func (mb *Member) Close() error {
	mb.uc.Close()
	return mb.leave()
}

func (mb *Member) send(to *net.UDPAddr, m *msg) { mb.ctl.send(mb.uc, to, m) }

// place is a member's RDMA side for one transfer.
type place struct {
	pd   *roce.PD
	cq   *roce.CQ
	qp   *roce.QP
	mr   *roce.MR
	buf  []byte
	ctxs []roce.Ctx
}

func (mb *Member) newPlace() (*place, error) {
	d := mb.cfg.Dev
	p := &place{pd: d.AllocPD()}
	var err error
	if p.cq, err = d.CreateCQ(4096); err != nil {
		return nil, fmt.Errorf("mcast: %w", err)
	}
	if p.qp, err = p.pd.CreateQP(roce.QPConfig{Type: roce.OOO, SendCQ: p.cq, RecvCQ: p.cq, MaxSendWR: 1, MaxRecvWR: 1}); err != nil {
		return nil, fmt.Errorf("mcast: %w", err)
	}
	return p, nil
}

// take binds the offer's group contexts to a buffer of its size and
// connects to the sender's queue pair.
func (p *place) take(mb *Member, o *msg) error {
	gid, ok := sameFamily(o.GID, mb.cfg.Group)
	var err error
	switch {
	case !ok:
		return fmt.Errorf("offer: sender GID %q", o.GID)
	case o.Size < 0 || o.Size > mb.cfg.MaxSize:
		return fmt.Errorf("offer: %d bytes, this member takes at most %d", o.Size, mb.cfg.MaxSize)
	case o.Ctxs < 1 || o.Ctxs > 64 || o.CtxBase < roce.GroupCtxFirst || o.CtxBase+uint32(o.Ctxs)-1 > roce.GroupCtxLast:
		return fmt.Errorf("offer: group contexts %#x+%d", o.CtxBase, o.Ctxs)
	}
	p.buf = make([]byte, max(o.Size, 1))
	if p.mr, err = p.pd.RegMR(p.buf, roce.LocalWrite|roce.RemoteWrite); err != nil {
		return err
	}
	reg := roce.GroupRegion{Group: mb.cfg.Group, Addr: p.mr.Addr(), Len: uint64(o.Size), RKey: p.mr.RKey()}
	for i := range o.Ctxs {
		x := roce.MakeCtx(o.CtxBase+uint32(i), o.CtxKey)
		if err := p.qp.DefineGroupContext(x, reg); err != nil {
			return err
		}
		p.ctxs = append(p.ctxs, x)
	}
	return p.qp.Connect(0, roce.Endpoint{QPN: o.QPN, GID: roce.GIDFromIP(gid)}, nil)
}

func (p *place) close() {
	if p.qp != nil {
		p.qp.Destroy()
	}
	if p.mr != nil {
		p.mr.Deregister()
	}
	p.pd.Dealloc()
}

// Next announces this member until a sender offers a file, takes it, checks
// its SHA-256 when the sender says done, writes it under Dir and answers
// with the result. It returns the file's outcome (an error only when the
// member cannot go on: ctx ended, the control socket closed).
func (mb *Member) Next(ctx context.Context) (*Received, error) {
	p, err := mb.newPlace()
	if err != nil {
		return nil, err
	}
	defer p.close()
	var b [8]byte
	rand.Read(b[:])
	nonce := binary.LittleEndian.Uint64(b[:]) | 1
	hello := &msg{Kind: kindHello, Member: nonce, GID: mb.local.String(), QPN: p.qp.QPN()}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	mb.send(mb.group, hello)
	var offer *msg
	var from *net.UDPAddr
	var rcv *Received
	idle := time.Now().Add(mb.cfg.Idle)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			if offer == nil {
				mb.send(mb.group, hello)
			} else if time.Now().After(idle) {
				rcv.Error = fmt.Sprintf("the sender went quiet for %v", mb.cfg.Idle)
				return rcv, nil
			}
		case pk := <-mb.in:
			m := pk.m
			if m.Kind == kindDone && mb.last != nil && m.Session == mb.lastS && (offer == nil || m.Session != offer.Session) {
				mb.send(pk.from, mb.last) // the last transfer's result was lost
				continue
			}
			if m.Member != nonce {
				continue
			}
			switch {
			case m.Kind == kindOffer && offer == nil:
				offer, from = m, pk.from
				idle = time.Now().Add(mb.cfg.Idle)
				rcv = &Received{Name: m.Name, Size: m.Size, SHA256: m.SHA256, From: from.AddrPort().Addr().Unmap()}
				if err := checkName(m.Name); err != nil {
					rcv.Error = err.Error()
					return rcv, nil
				}
				if err := p.take(mb, m); err != nil {
					rcv.Error = err.Error()
					mb.cfg.Log.Warn("offer refused", "from", from, "err", err)
					return rcv, nil
				}
				mb.cfg.Log.Info("offer taken", "from", from, "name", m.Name, "size", m.Size)
				mb.send(from, &msg{Kind: kindReady, Session: m.Session, Member: nonce})
			case offer == nil || m.Session != offer.Session:
			case m.Kind == kindOffer:
				idle = time.Now().Add(mb.cfg.Idle)
				mb.send(from, &msg{Kind: kindReady, Session: m.Session, Member: nonce})
			case m.Kind == kindDone:
				mb.finish(rcv, p, m.OK)
				res := &msg{Kind: kindResult, Session: m.Session, Member: nonce, OK: rcv.OK, Error: rcv.Error}
				mb.last, mb.lastS = res, m.Session
				mb.send(from, res)
				return rcv, nil
			}
		}
	}
}

// finish checks the placed bytes and writes the file.
func (mb *Member) finish(rcv *Received, p *place, ok bool) {
	if !ok {
		rcv.Error = "the sender gave this member up (operations not acknowledged)"
		return
	}
	sum := sha256.Sum256(p.buf[:rcv.Size])
	if got := hex.EncodeToString(sum[:]); got != rcv.SHA256 {
		rcv.Error = fmt.Sprintf("sha256 %s, the sender's is %s", got, rcv.SHA256)
		return
	}
	path := filepath.Join(mb.cfg.Dir, rcv.Name)
	if err := writeFile(path, p.buf[:rcv.Size], mb.cfg.Overwrite); err != nil {
		rcv.Error = err.Error()
		return
	}
	rcv.OK, rcv.Path = true, path
}

// checkName accepts a base name only.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name || len(name) > 255 {
		return fmt.Errorf("offer: file name %q is not a base name", name)
	}
	return nil
}

// writeFile writes b to path through a temporary file in the same
// directory, renamed into place (refused when path exists, unless
// overwrite).
func writeFile(path string, b []byte, overwrite bool) error {
	if _, err := os.Lstat(path); err == nil && !overwrite {
		return fmt.Errorf("%s exists (mcast recv --overwrite replaces it)", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".mcast-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
