package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

// The pingpong variants of rdma-core other than ibv_rc_pingpong: --uc (ibv_uc_pingpong: the same
// exchange and loop on a UC queue pair), --ud (ibv_ud_pingpong: a UD queue pair, Q_Key
// 0x11111111, receives behind the 40-byte GRH area) and --srq (ibv_srq_pingpong: -q RC queue
// pairs on one shared receive queue, 256 address messages each way). They speak the stock
// tools' exchanges only: no agreement on -s and -n with another xdproce.

// pingpongMode is the variant chosen by the flags ("" is ibv_rc_pingpong).
type pingpongMode string

const (
	modeRC  pingpongMode = ""
	modeUC  pingpongMode = "uc"
	modeUD  pingpongMode = "ud"
	modeSRQ pingpongMode = "srq"
)

// pickMode returns the mode of the --uc, --ud and --srq flags, or an error when more than one
// is set.
func pickMode(uc, ud, srq bool) (pingpongMode, error) {
	var set []pingpongMode
	for _, c := range []struct {
		on bool
		m  pingpongMode
	}{{uc, modeUC}, {ud, modeUD}, {srq, modeSRQ}} {
		if c.on {
			set = append(set, c.m)
		}
	}
	switch len(set) {
	case 0:
		return modeRC, nil
	case 1:
		return set[0], nil
	}
	return modeRC, fmt.Errorf("--%s and --%s: give at most one of --uc, --ud and --srq", set[0], set[1])
}

// runMode runs the variant m on conn within the run's budget and returns the tool's output
// lines.
func (p *pingpong) runMode(ctx context.Context, conn net.Conn, client bool, m pingpongMode, qps, rx int) ([]string, error) {
	n := 1
	if m == modeSRQ {
		n = qps
	}
	bctx, cancel := withBudget(ctx, p.budgetBase, p.size, p.iters, n)
	defer cancel()
	var lines []string
	var err error
	if m == modeSRQ {
		lines, err = p.runSRQ(bctx, conn, client, qps, rx)
	} else {
		lines, err = p.runSingle(bctx, conn, client, m)
	}
	return lines, budgetErr(bctx, err)
}

func (p *pingpong) connectOptions(conn net.Conn) (*roce.ConnectOptions, cm.GID) {
	gid := p.sgid
	if !gid.IsValid() {
		gid = xfer.LocalGID(p.dev, conn.LocalAddr())
	}
	opts := roce.DefaultConnectOptions()
	opts.SGID, opts.PathMTU = gid, p.mtu
	return &opts, cm.GIDFromAddr(gid)
}

// runSingle runs ibv_uc_pingpong's or ibv_ud_pingpong's exchange and loop (rc's, on another
// queue pair type).
func (p *pingpong) runSingle(ctx context.Context, conn net.Conn, client bool, m pingpongMode) ([]string, error) {
	typ := roce.UC
	bufLen := 2 * p.size
	if m == modeUD {
		typ = roce.UD
		bufLen += roce.GRHLen
	}
	pd := p.dev.AllocPD()
	cq, err := p.dev.CreateCQ(min(p.iters+256, roce.MaxCQDepth))
	if err != nil {
		return nil, err
	}
	mr, err := pd.RegMR(make([]byte, bufLen), roce.LocalWrite)
	if err != nil {
		return nil, err
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: max(p.iters, 16)})
	if err != nil {
		return nil, err
	}
	opts, gid := p.connectOptions(conn)
	peer := &toolpeer.Peer{QP: q, CQ: cq, MR: mr, GID: gid, Connect: opts, PSN: rand.Uint32()&0xffffff | 1}
	res, err := peer.Pingpong(ctx, conn, client, p.size, p.iters)
	if err != nil {
		return nil, err
	}
	return res.Lines(), nil
}

// runSRQ runs ibv_srq_pingpong's exchange and loop on qps RC queue pairs sharing one SRQ of rx
// receives.
func (p *pingpong) runSRQ(ctx context.Context, conn net.Conn, client bool, qps, rx int) ([]string, error) {
	pd := p.dev.AllocPD()
	cq, err := p.dev.CreateCQ(min(rx+qps, roce.MaxCQDepth))
	if err != nil {
		return nil, err
	}
	mr, err := pd.RegMR(make([]byte, p.size), roce.LocalWrite)
	if err != nil {
		return nil, err
	}
	srq, err := pd.CreateSRQ(roce.SRQConfig{MaxWR: rx, MaxSGE: 1})
	if err != nil {
		return nil, err
	}
	peer := &toolpeer.SRQPeer{SRQ: srq, CQ: cq, MR: mr, RxDepth: rx}
	peer.Connect, peer.GID = p.connectOptions(conn)
	for range qps {
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxSGE: 1, SRQ: srq})
		if err != nil {
			return nil, err
		}
		peer.QPs = append(peer.QPs, q)
	}
	res, err := peer.Pingpong(ctx, conn, client, p.size, p.iters)
	if err != nil {
		return nil, err
	}
	return res.Lines(), nil
}
