package mcast

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// Config configures Send.
type Config struct {
	Dev   *roce.Device
	Iface *net.Interface // Dev's interface: the control sockets use it
	Group netip.Addr
	Port  int    // control port (0: DefaultPort)
	PSK   []byte // the control datagrams' key
	// Wait bounds the wait for members' announcements (0: 3 s): the sender
	// takes those heard until Wait passes or one second after the last new
	// one, and fails with none.
	Wait     time.Duration
	Chunk    int           // bytes per operation (0: 256 KiB)
	Ctxs     int           // group contexts, the operations in flight (0: 8)
	Timeout  time.Duration // a member's first acknowledgement timeout (0: 250 ms); doubles per retry, at most 2 s
	MaxTries int           // attempts per member and operation, the multicast one included (0: 6)
	Log      *slog.Logger
}

// MemberResult is what became of one member.
type MemberResult struct {
	Addr       netip.Addr // its control address
	GID        netip.Addr
	OK         bool   // the member checked the SHA-256 and wrote the file
	Error      string // why not
	Acked      int    // operations it acknowledged
	Retries    int    // unicast retries sent to it
	RetryBytes int64  // their payload bytes
}

// Result is a transfer's outcome.
type Result struct {
	Name      string
	Size      int64
	SHA256    string
	Ops       int // multicast operations
	Frames    int // multicast data frames: ⌈Size / segment⌉ (one per operation when Size is 0)
	Segment   int
	Members   []MemberResult
	Elapsed   time.Duration // from the first operation to the last acknowledgement
	StaleAcks int           // acknowledgements of a tid no longer current
}

func (c *Config) defaults() {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Wait == 0 {
		c.Wait = 3 * time.Second
	}
	if c.Chunk == 0 {
		c.Chunk = 256 << 10
	}
	if c.Ctxs == 0 {
		c.Ctxs = 8
	}
	if c.Timeout == 0 {
		c.Timeout = 250 * time.Millisecond
	}
	if c.MaxTries == 0 {
		c.MaxTries = 6
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// member is the sender's view of one member.
type member struct {
	nonce uint64
	addr  *net.UDPAddr // control
	gid   netip.Addr
	qpn   uint32   // its queue pair
	qp    *roce.QP // this side's, connected to it
	ready bool
	alive bool // ready and not given up
	done  bool // its result came
	res   MemberResult
	tid   []uint32    // per group context: the tid its context has
	tries []int       // per group context: attempts of the current operation
	due   []time.Time // per group context: when to retry
	acked []bool      // per group context: the current operation acknowledged
}

// sender is one transfer's state.
type sender struct {
	cfg     Config
	session uint64
	local   netip.Addr
	uc      *net.UDPConn
	ctl
	members []*member
	byQPN   map[uint32]*member // by this side's queue pair
}

// Send multicasts data (the file's bytes, under name's base name) to the
// members that announce themselves on cfg.Group, and reports per member.
func Send(ctx context.Context, cfg Config, name string, data []byte) (*Result, error) {
	cfg.defaults()
	if err := CheckDest(cfg.Group, cfg.Iface); err != nil {
		return nil, err
	}
	if cfg.Ctxs < 1 || cfg.Ctxs > 64 || cfg.Chunk < 1 || cfg.Chunk > 1<<30 {
		return nil, fmt.Errorf("mcast: %d contexts of %d bytes: want 1..64 of 1 B..1 GiB", cfg.Ctxs, cfg.Chunk)
	}
	s := &sender{cfg: cfg, ctl: ctl{key: cfg.PSK, log: cfg.Log, in: make(chan packet, 64)}, byQPN: map[uint32]*member{}}
	var err error
	if s.local, err = localAddr(cfg.Iface, cfg.Group); err != nil {
		return nil, err
	}
	var b [8]byte
	rand.Read(b[:])
	s.session = binary.LittleEndian.Uint64(b[:]) | 1
	lc, err := listenGroup(cfg.Group, cfg.Port, cfg.Iface)
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	if s.uc, err = dialUnicast(s.local, cfg.Iface); err != nil {
		return nil, err
	}
	defer s.uc.Close()
	go s.read(lc)
	go s.read(s.uc)

	sum := sha256.Sum256(data)
	res := &Result{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	t, err := newTransport(cfg, data)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if err := s.discover(ctx); err != nil {
		return nil, err
	}
	base := uint32(roce.GroupCtxFirst) + uint32(b[0])<<8 // a different range per session, mostly
	key := b[1]
	if err := s.offer(ctx, t, &msg{Kind: kindOffer, Session: s.session, GID: s.local.String(), Name: name,
		Size: res.Size, SHA256: res.SHA256, CtxBase: base, CtxKey: key, Ctxs: cfg.Ctxs}); err != nil {
		return nil, err
	}
	seg := cfg.Dev.OOOPathMTU().Bytes()
	res.Segment, res.Ops = seg, max(1, (len(data)+cfg.Chunk-1)/cfg.Chunk)
	res.Frames = max(1, (len(data)+seg-1)/seg)
	start := time.Now()
	if res.StaleAcks, err = s.stream(ctx, t, base, key, res.Ops); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	s.finish(ctx)
	for _, m := range s.members {
		res.Members = append(res.Members, m.res)
	}
	return res, nil
}

func (s *sender) send(to *net.UDPAddr, m *msg) { s.ctl.send(s.uc, to, m) }

// discover collects the members' announcements: until Wait passes, or one
// second after the last new member.
func (s *sender) discover(ctx context.Context) error {
	end := time.Now().Add(s.cfg.Wait)
	quiet := end
	seen := map[uint64]bool{}
	for {
		stop := end
		if quiet.Before(end) {
			stop = quiet
		}
		wait := time.Until(stop)
		if wait <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-s.in:
			m := p.m
			if m.Kind != kindHello || seen[m.Member] {
				continue
			}
			gid, ok := sameFamily(m.GID, s.cfg.Group)
			if !ok || m.QPN == 0 {
				continue
			}
			seen[m.Member] = true
			s.members = append(s.members, &member{nonce: m.Member, addr: p.from, gid: gid, qpn: m.QPN,
				res: MemberResult{Addr: p.from.AddrPort().Addr().Unmap(), GID: gid}})
			s.cfg.Log.Info("member announced", "addr", p.from, "qpn", m.QPN)
			quiet = time.Now().Add(time.Second)
		case <-time.After(wait):
		}
	}
	if len(s.members) == 0 {
		return fmt.Errorf("mcast: no member announced itself on %v:%d within %v", s.cfg.Group, s.cfg.Port, s.cfg.Wait)
	}
	return nil
}

// offer connects a queue pair to each member and sends it the offer until
// it is ready (within Wait).
func (s *sender) offer(ctx context.Context, t *transport, o *msg) error {
	var live []*member
	for _, m := range s.members {
		qp, err := t.connect(m.gid, m.qpn)
		if err != nil {
			m.res.Error = err.Error() // not offered: it stays out, the others go on
			s.cfg.Log.Warn("member left out", "addr", m.addr, "err", err)
			continue
		}
		live = append(live, m)
		m.qp = qp
		s.byQPN[qp.QPN()] = m
		n := s.cfg.Ctxs
		m.tid, m.tries, m.due, m.acked = make([]uint32, n), make([]int, n), make([]time.Time, n), make([]bool, n)
	}
	end := time.Now().Add(s.cfg.Wait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		pending := 0
		for _, m := range live {
			if !m.ready {
				pending++
				om := *o
				om.Member, om.QPN = m.nonce, m.qp.QPN()
				s.send(m.addr, &om)
			}
		}
		if pending == 0 || time.Now().After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-s.in:
			if p.m.Kind == kindReady && p.m.Session == s.session {
				for _, m := range s.members {
					if m.nonce == p.m.Member {
						m.ready, m.alive = true, true
					}
				}
			}
		case <-tick.C:
		}
	}
	ready := 0
	for _, m := range live {
		if m.ready {
			ready++
		} else {
			m.res.Error = "announced itself but did not take the offer"
		}
	}
	if ready == 0 {
		return errors.New("mcast: no member took the offer")
	}
	return nil
}

// finish tells every ready member the transfer is over (ok: it acknowledged
// every operation) and collects the results, for up to 3 s.
func (s *sender) finish(ctx context.Context) {
	end := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		pending := 0
		for _, m := range s.members {
			if m.ready && !m.done {
				pending++
				s.send(m.addr, &msg{Kind: kindDone, Session: s.session, Member: m.nonce, OK: m.alive})
			}
		}
		if pending == 0 || time.Now().After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case p := <-s.in:
			if p.m.Kind != kindResult || p.m.Session != s.session {
				continue
			}
			for _, m := range s.members {
				if m.nonce == p.m.Member && m.ready && !m.done {
					m.done = true
					m.res.OK = p.m.OK && m.alive
					if !p.m.OK {
						m.res.Error = p.m.Error
					}
				}
			}
		case <-tick.C:
		}
	}
	for _, m := range s.members {
		if m.ready && !m.done && m.res.Error == "" {
			m.res.Error = "no result came"
		}
	}
}
