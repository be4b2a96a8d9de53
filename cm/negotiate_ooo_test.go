package cm

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
)

// agreeOnce runs the perftest exchange's agreement between cli and srv and returns both errors.
func agreeOnce(t *testing.T, cli, srv BenchParams) (cerr, serr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, s := testenv.TCPPair(t)
	return negotiateOnce(ctx, "perftest", c, s, &Negotiation{Local: cli, Flags: map[string]string{"mode": "--mode", "paths": "--paths"}},
		&Negotiation{Local: srv, Flags: map[string]string{"mode": "--mode", "paths": "--paths"}})
}

// TestNegotiateMode: the agreement carries the mode and the paths: a server not given --mode
// takes the client's ooo (and its --paths), the same mode on both sides agrees, different
// modes are refused with both values, and an agreed OOO run that cannot be one (read, --qps 2)
// is refused on both ends.
func TestNegotiateMode(t *testing.T) {
	rc := BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1, Mode: ModeRC, Paths: 1}
	ooo := BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1, Mode: ModeOOO, Paths: 4, Set: []string{"mode", "paths"}}
	agreed := func(cerr, serr error) (c, s BenchParams) {
		var ca, sa *AgreedError
		if !errors.As(cerr, &ca) || !errors.As(serr, &sa) {
			t.Fatalf("client %v, server %v; want both agreed", cerr, serr)
		}
		return ca.Params, sa.Params
	}
	c, s := agreed(agreeOnce(t, ooo, rc))
	if c.Mode != ModeOOO || c.Paths != 4 || s.Mode != ModeOOO || s.Paths != 4 {
		t.Errorf("client agreed %+v, server %+v; want mode ooo over 4 paths", c, s)
	}
	c, s = agreed(agreeOnce(t, rc, rc))
	if c.Mode != ModeRC || s.Mode != ModeRC {
		t.Errorf("client agreed %+v, server %+v; want mode rc", c, s)
	}
	srvRC := rc
	srvRC.Set = []string{"mode"}
	cerr, serr := agreeOnce(t, ooo, srvRC)
	const want = "client --mode ooo, server --mode rc"
	if !errors.Is(serr, ErrParamMismatch) || !strings.Contains(serr.Error(), want) || cerr == nil || !strings.Contains(cerr.Error(), want) {
		t.Errorf("client %v, server %v; want both to name %q", cerr, serr, want)
	}
	for _, tc := range []struct {
		mod  func(*BenchParams)
		want string
	}{
		{func(p *BenchParams) { p.QPs = 2 }, "--mode ooo runs one queue pair (--qps 2)"},
		{func(p *BenchParams) { p.Op = "read" }, "--mode ooo runs write, not read"},
		{func(p *BenchParams) { p.Sweep = true }, "--mode ooo runs one size"},
	} {
		cli, srv := ooo, rc
		tc.mod(&cli)
		tc.mod(&srv)
		cerr, serr := agreeOnce(t, cli, srv)
		if !errors.Is(serr, ErrParamMismatch) || !strings.Contains(serr.Error(), tc.want) || cerr == nil || !strings.Contains(cerr.Error(), tc.want) {
			t.Errorf("client %v, server %v; want both to name %q", cerr, serr, tc.want)
		}
	}
}

// oldServer plays an xdproce server from before the modes: it recognises the tagged client
// and answers its agreement with the parameters and no mode.
func oldServer(ctx context.Context, conn net.Conn) error {
	pc := NewPerftestConn(conn, false)
	if _, err := pc.ExchangeVersions(ctx, ""); err != nil {
		return err
	}
	if _, _, _, err := pc.ExchangeSysData(ctx, 4096, 64); err != nil {
		return err
	}
	if _, err := pc.ExchangeMTU(ctx, 3); err != nil {
		return err
	}
	if _, err := pc.read(ctx, PerftestKeyLen); err != nil {
		return err
	}
	if _, err := conn.Write(benchHello(PerftestKeyLen)); err != nil {
		return err
	}
	var p BenchParams
	if err := readFrame(conn, &p); err != nil {
		return err
	}
	return writeFrame(conn, map[string]any{"params": map[string]any{"op": p.Op, "size": p.Size, "iters": p.Iters, "qps": p.QPs}})
}

// TestNegotiateOOOOldPeer: --mode ooo against an xdproce from before the modes is refused with
// one line on the side that asked: a client whose server answers without a mode, a server
// whose client sent none (that client reads the server's line). An RC client agrees with
// the old server as before.
func TestNegotiateOOOOldPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, mode := range []string{ModeOOO, ModeRC} {
		c, s := testenv.TCPPair(t)
		cli := BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1, Mode: mode, Paths: 1}
		cerr, serr := runBoth(func() error {
			defer c.Close()
			_, _, err := NewPerftestConn((&Negotiation{Local: cli}).Conn(c), true).Setup(ctx, WriteBW, PerftestSetup{MTU: 3, Local: tagged(0x11, "198.51.100.2")})
			return err
		}, func() error { return oldServer(ctx, s) })
		if serr != nil {
			t.Fatalf("old server: %v", serr)
		}
		var ae *AgreedError
		switch {
		case mode == ModeRC && (!errors.As(cerr, &ae) || ae.Params.Mode != ""):
			t.Errorf("rc client: %v, want agreed", cerr)
		case mode == ModeOOO && (!errors.Is(cerr, ErrOOOPeer) || !strings.HasPrefix(cerr.Error(), "--mode ooo needs an xdproce peer: the server is an xdproce from before the OOO mode")):
			t.Errorf("ooo client: %v, want %v naming an old server", cerr, ErrOOOPeer)
		}
	}
	old := BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1}
	cerr, serr := agreeOnce(t, old, BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1, Mode: ModeOOO, Set: []string{"mode"}})
	if !errors.Is(serr, ErrOOOPeer) || !strings.Contains(serr.Error(), "the client is an xdproce from before the OOO mode") {
		t.Errorf("server: %v, want %v naming an old client", serr, ErrOOOPeer)
	}
	if cerr == nil || !strings.HasPrefix(cerr.Error(), "server: --mode ooo needs an xdproce peer: ") || strings.Contains(cerr.Error(), "\n") {
		t.Errorf("old client: %v, want the server's one line", cerr)
	}
}

// TestNegotiateOOOStock: a client asking for --mode ooo whose server is a stock tool gets the
// stock keys and its Stock refusal, before anything else of the exchange.
func TestNegotiateOOOStock(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, s := testenv.TCPPair(t)
	cli := BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1, Mode: ModeOOO}
	refuse := errors.New("refused: stock")
	cerr, _ := runBoth(func() error {
		defer c.Close()
		_, _, err := NewPerftestConn((&Negotiation{Local: cli, Stock: func() error { return refuse }}).Conn(c), true).Setup(ctx, WriteBW,
			PerftestSetup{MTU: 3, Local: tagged(0x11, "198.51.100.2"), Connect: func(PerftestDest, int) error { return errors.New("connected") }})
		return err
	}, func() error {
		stock := tagged(0x12, "198.51.100.1")
		stock.PSN ^= 1 // not a tag: a stock tool's random PSN
		_, _, err := NewPerftestConn(s, false).Setup(ctx, WriteBW, PerftestSetup{MTU: 3, Local: stock})
		return err
	})
	if !errors.Is(cerr, refuse) {
		t.Errorf("client: %v, want the Stock refusal", cerr)
	}
}

// TestExchangeOOO: the run's exchanges carry the endpoints (the server connects before it
// answers), the client's result and what landed; a server's endpoint without a buffer is
// refused before connect.
func TestExchangeOOO(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, s := testenv.TCPPair(t)
	cp := OOOPeer{QPN: 0x11, Ctxs: []uint32{0x101, 0x202}}
	sp := OOOPeer{QPN: 0x12, Ctxs: []uint32{0x303}, VA: 0x1000, RKey: 7, Len: 65536}
	var order []string
	var gotC, gotS OOOPeer
	var landed OOOLanded
	var result OOOResult
	cerr, serr := runBoth(func() error {
		var err error
		if gotS, err = ExchangeOOO(ctx, c, true, cp, func(OOOPeer) error { order = append(order, "client"); return nil }); err != nil {
			return err
		}
		_, landed, err = FinishOOO(ctx, c, true, OOOResult{Size: 65536, Iters: 5, Seconds: 0.5, SHA256: "ab"}, nil)
		c.Close()
		return err
	}, func() error {
		var err error
		if gotC, err = ExchangeOOO(ctx, s, false, sp, func(OOOPeer) error { order = append(order, "server"); return nil }); err != nil {
			return err
		}
		result, _, err = FinishOOO(ctx, s, false, OOOResult{}, func(r OOOResult) OOOLanded { return OOOLanded{Completions: uint64(r.Iters), SHA256: r.SHA256} })
		return err
	})
	if cerr != nil || serr != nil {
		t.Fatalf("client %v, server %v", cerr, serr)
	}
	if gotS.RKey != 7 || gotS.Len != 65536 || len(gotC.Ctxs) != 2 || gotC.Ctxs[1] != 0x202 || strings.Join(order, ",") != "server,client" {
		t.Errorf("client got %+v, server got %+v, connected %v", gotS, gotC, order)
	}
	if result.Iters != 5 || landed.Completions != 5 || landed.SHA256 != "ab" {
		t.Errorf("server read %+v, client %+v", result, landed)
	}

	c, s = testenv.TCPPair(t)
	sp.Len = 0
	connected := false
	cerr, _ = runBoth(func() error {
		defer c.Close()
		_, err := ExchangeOOO(ctx, c, true, cp, func(OOOPeer) error { connected = true; return nil })
		return err
	}, func() error {
		_, err := ExchangeOOO(ctx, s, false, sp, func(OOOPeer) error { return nil })
		return err
	})
	if !errors.Is(cerr, ErrProtocol) || connected {
		t.Errorf("a server endpoint without a buffer: %v (connected %v), want %v before connect", cerr, connected, ErrProtocol)
	}
}
