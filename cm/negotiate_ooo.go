package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// bench --mode ooo (docs/ooo.md): the agreement of negotiate.go carries the mode, and an OOO
// run follows it on the same connection with exchanges of its own, xdproce to xdproce only:
//
//  1. The client sends its OOOPeer (queue pair, GID, the contexts its delivered completions
//     come to); the server connects its OOO queue pair to it and answers with its own, which
//     adds the buffer the client WRITEs into (VA, rkey, length) and the contexts that hold it.
//     The server is connected before it answers, so the client's first packet finds it ready.
//  2. After its last delivered completion the client sends its measurement (OOOResult); the
//     server answers with what landed (OOOLanded: completions sent and the buffer's SHA-256).
//
// Like perftest's exchange, this hands out keys (context keys, rkey) to whoever connects,
// unauthenticated: bench is a benchmark between hosts one controls (bound to --dev, one test,
// then exit), not xdproce's file service, whose protocol gives keys to authenticated peers
// only.
//
// A peer that cannot run OOO mode never gets that far: a stock tool (perftest) is found by the
// recognition (the caller's Negotiation.Stock refuses then), and an xdproce from before the
// modes sends and answers an agreement without a mode (ErrOOOPeer on the side that asked).

// The modes of a bench run.
const (
	ModeRC  = "rc"  // standard RC queue pairs
	ModeOOO = "ooo" // OOO queue pairs (out-of-order RDMA over datagrams)
)

// maxBenchPaths is the largest Paths an agreement takes (roce.MaxOOOPaths).
const maxBenchPaths = 64

// ErrOOOPeer: --mode ooo was asked for and the peer cannot run it.
var ErrOOOPeer = errors.New("--mode ooo needs an xdproce peer")

// resolveMode agrees on the mode and paths (pick is resolve's: a value given on both sides
// must be equal). A client whose agreement has no mode is an xdproce from before the modes:
// fine for RC, refused for a server given --mode ooo.
func resolveMode(out *BenchParams, client, srv BenchParams, pick func(string, any, any) any) error {
	if client.Mode == "" {
		if srv.Mode == ModeOOO {
			return fmt.Errorf("%w: the client is an xdproce from before the OOO mode (its agreement names no mode: upgrade it)", ErrOOOPeer)
		}
		return nil
	}
	out.Mode = pick("mode", client.Mode, srv.Mode).(string)
	out.Paths = pick("paths", client.Paths, srv.Paths).(int)
	return nil
}

// oooLimits lists what an agreed OOO run cannot do.
func oooLimits(p BenchParams) []string {
	var d []string
	switch {
	case p.Mode != ModeOOO && p.Mode != ModeRC && p.Mode != "":
		return []string{fmt.Sprintf("unknown mode %q", p.Mode)}
	case p.Paths < 0 || p.Paths > maxBenchPaths:
		return []string{fmt.Sprintf("--paths %d (want 1 to %d)", p.Paths, maxBenchPaths)}
	case p.Mode != ModeOOO:
		if p.Paths > 1 {
			d = append(d, fmt.Sprintf("--paths %d is for --mode ooo", p.Paths))
		}
		return d
	}
	if p.Op != "write" {
		d = append(d, fmt.Sprintf("--mode ooo runs write, not %s", p.Op))
	}
	if p.QPs > 1 {
		d = append(d, fmt.Sprintf("--mode ooo runs one queue pair (--qps %d)", p.QPs))
	}
	if p.Sweep {
		d = append(d, "--mode ooo runs one size (not -a)")
	}
	if p.Seconds > 0 {
		d = append(d, "--mode ooo runs by iterations (not -D)")
	}
	return d
}

// checkMode checks the server's answer against the mode this client asked for.
func (n *Negotiation) checkMode(p BenchParams) error {
	switch {
	case n.Local.Mode == ModeOOO && p.Mode == "":
		return fmt.Errorf("%w: the server is an xdproce from before the OOO mode (its agreement names no mode: upgrade it)", ErrOOOPeer)
	case p.Mode == "":
		return nil // no modes asked for, or an older server: RC as asked
	case p.Mode != ModeRC && p.Mode != ModeOOO:
		return fmt.Errorf("cm: bench parameters from the server: %w: mode %q", ErrProtocol, p.Mode)
	case n.Local.Mode == "" && p.Mode == ModeOOO:
		return fmt.Errorf("cm: bench parameters from the server: %w: mode ooo for a client that named none", ErrProtocol)
	}
	if len(oooLimits(p)) > 0 {
		return fmt.Errorf("cm: bench parameters from the server: %w: %+v", ErrProtocol, p)
	}
	return nil
}

// OOOPeer is what one side of a bench --mode ooo run tells the other.
type OOOPeer struct {
	QPN uint32 `json:"qpn"`
	GID GID    `json:"gid"`
	// Ctxs are the contexts (id << 8 | key) the peer's packets address: the server's hold its
	// buffer, the client's receive the completions.
	Ctxs []uint32 `json:"ctxs"`
	// The server's buffer: where the client WRITEs.
	VA   uint64 `json:"va,omitempty"`
	RKey uint32 `json:"rkey,omitempty"`
	Len  int    `json:"len,omitempty"`
}

// OOOResult is the client's measurement of an OOO run.
type OOOResult struct {
	Size      int     `json:"size"`
	Iters     int     `json:"iters"`     // WRITEs delivered
	Seconds   float64 `json:"seconds"`   // from the first post to the last delivered completion
	Retries   int     `json:"retries"`   // WRITEs reissued with a larger tid after a timeout
	Paths     int     `json:"paths"`     // UDP source ports the WRITEs used
	SHA256    string  `json:"sha256"`    // of the client's source buffer
	Delivered uint64  `json:"delivered"` // completion packets that delivered a WRITE (the client's counter)
}

// OOOLanded is the server's answer: what its queue pair saw.
type OOOLanded struct {
	Completions uint64 `json:"completions"` // OOO_COMPLETION packets sent
	SHA256      string `json:"sha256"`      // of the buffer the client WRITEs into
}

// ExchangeOOO runs step 1: it returns the peer's OOOPeer after connect accepted it (the
// server connects before it answers).
func ExchangeOOO(ctx context.Context, conn net.Conn, client bool, local OOOPeer, connect func(OOOPeer) error) (OOOPeer, error) {
	var remote OOOPeer
	check := func() error {
		if remote.QPN == 0 || remote.QPN > 0xffffff || len(remote.Ctxs) == 0 || !client && remote.Len != 0 ||
			client && (remote.Len <= 0 || remote.RKey == 0) {
			return fmt.Errorf("cm: bench ooo: %w: the peer's %+v", ErrProtocol, remote)
		}
		return connect(remote)
	}
	err := exchangeFrames(ctx, conn, client, &local, &remote, check)
	if err == nil && client {
		err = check()
	}
	return remote, err
}

// FinishOOO runs step 2: the client sends r and returns the server's OOOLanded; the server
// returns the client's OOOResult, after answering it with what landed returns.
func FinishOOO(ctx context.Context, conn net.Conn, client bool, r OOOResult, landed func(OOOResult) OOOLanded) (OOOResult, OOOLanded, error) {
	var in OOOResult
	var out OOOLanded
	var err error
	if client {
		err = exchangeFrames(ctx, conn, true, &r, &out, nil)
		return r, out, err
	}
	err = exchangeFrames(ctx, conn, false, &out, &in, func() error { out = landed(in); return nil })
	if err == nil {
		// Let the client read the answer and close first, so that it gets the answer rather
		// than a reset.
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		conn.Read(make([]byte, 1))
	}
	return in, out, err
}

// exchangeFrames sends mine and reads theirs in perftest's order (the client writes first),
// each bounded by a minute and ctx; the server calls between (if any) after reading theirs.
func exchangeFrames(ctx context.Context, conn net.Conn, client bool, mine, theirs any, between func() error) error {
	ctx, cancel := boundConn(ctx, conn, time.Minute)
	defer cancel()
	if client {
		if err := writeFrame(conn, mine); err != nil {
			return ctxErr(ctx, fmt.Errorf("cm: bench ooo: send: %w", err))
		}
	}
	if err := readFrame(conn, theirs); err != nil {
		return ctxErr(ctx, fmt.Errorf("cm: bench ooo: read: %w", err))
	}
	if client {
		return nil
	}
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	if err := writeFrame(conn, mine); err != nil {
		return ctxErr(ctx, fmt.Errorf("cm: bench ooo: send: %w", err))
	}
	return nil
}
