package cm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Two xdproce ends of a pingpong or perftest exchange recognise each other inside the stock
// exchange and then agree on the run's parameters, so that neither waits for messages the
// other will never send. What a stock tool (perftest, ibv_rc_pingpong) receives is unchanged:
//
//  1. Each side picks its first PSN as a tag of its own address fields, TagPSN(QPN, GID, rkey,
//     VA): 24 bits of a SHA-256. A PSN is a random 24-bit number to the tools, and any value
//     is valid, so the message keeps its format and meaning.
//  2. The server reads the client's address message first (in both exchanges). When its PSN
//     is the tag of its other fields, the server answers with a hello of the same length
//     ("xdproce-bench\x00" and the version, NUL-padded) in place of its own address; otherwise
//     it answers as the tool would and the run is stock from there on.
//  3. The client reads the hello where it expected the server's address and sends its
//     parameters (BenchParams, one frame: a 4-byte big-endian length, then JSON); the server
//     answers with the parameters both use, or with a refusal naming the values that differ.
//     Both then return *AgreedError (or the mismatch, as an error), and the caller sets up for
//     the agreed parameters and runs the whole exchange again on the same connection, this
//     time without Negotiation.
//
// A stock client whose random PSN happens to equal the tag (one run in 2^24) receives the hello
// where it expects the server's address and stops with a read error; nothing else of the
// stock exchange differs. A stock server never receives anything but the stock messages.

// BenchParams are the parameters of a bench or pingpong run two xdproce ends agree on.
type BenchParams struct {
	Op    string `json:"op"`    // "write", "read", "send", "atomic", "lat", "pingpong"
	Size  int    `json:"size"`  // message bytes
	Iters int    `json:"iters"` // iterations per queue pair
	QPs   int    `json:"qps"`   // queue pairs
	SRQ   bool   `json:"srq,omitempty"`
	UD    bool   `json:"ud,omitempty"`
	Sweep bool   `json:"sweep,omitempty"` // every size from 2 B up (perftest's -a); Size is the first
	// Seconds is perftest's -D: run about this long (0: Iters decides).
	Seconds int `json:"seconds,omitempty"`
	// Calibrate marks one of the runs by which the client measures the rate for Seconds.
	Calibrate bool `json:"calibrate,omitempty"`
	// Mode is ModeRC or ModeOOO (bench write --mode ooo, negotiate_ooo.go). Every side that
	// knows the modes sends one; a peer from before them sends none, and answers none.
	Mode string `json:"mode,omitempty"`
	// Paths is the UDP source ports an OOO run spreads its packets over (bench --paths).
	Paths int `json:"paths,omitempty"`
	// Reliability, SRWindow and CC are the RC queue pairs' loss recovery and congestion control
	// (bench --reliability, --cc; negotiate_rel.go): what a side wants, and in the server's
	// answer what both use. A peer from before them sends none: go-back-N, no congestion control.
	Reliability string `json:"reliability,omitempty"`
	SRWindow    int    `json:"sr_window,omitempty"`
	CC          string `json:"cc,omitempty"`
	// Set lists the values given explicitly on this side's command line ("size", "iters",
	// "qps", "srq", "ud", "sweep", "seconds", "mode", "paths"); the others are defaults. Op is
	// always explicit.
	Set []string `json:"set,omitempty"`
}

func (p BenchParams) isSet(name string) bool { return slices.Contains(p.Set, name) }

// benchHelloVersion is the version of the recognition hello and of BenchParams; a peer that
// sends another refuses with a line saying so.
const benchHelloVersion = 1

var benchHelloMagic = []byte("xdproce-bench\x00")

// Negotiation is one side's part of the recognition and agreement described above. Wrap the
// connection with Conn before handing it to DialPingpong, ServePingpong or PerftestConn.Setup
// (directly or through internal/toolpeer's Peer), and choose the PSN with TagPSN.
type Negotiation struct {
	Local BenchParams
	// Flags names the command-line flags of the values, for the mismatch line
	// ({"size": "--size", ...}); a missing name is shown as "--" + the value's name.
	Flags map[string]string
	// Stock is called when the peer turned out to be a stock tool (or an xdproce that does not
	// tag); an error it returns ends the exchange.
	Stock func() error
	// Timeout bounds the parameter exchange (0: 10 s).
	Timeout time.Duration
}

// AgreedError is returned by the exchange when the two ends are xdproce and agreed: set up
// for Params and run the exchange again on the same connection, without Negotiation.
type AgreedError struct{ Params BenchParams }

func (e *AgreedError) Error() string {
	return fmt.Sprintf("cm: agreed with the xdproce peer on %s, %d B, %d iterations, %d queue pair(s); run again", e.Params.Op, e.Params.Size, e.Params.Iters, e.Params.QPs)
}

// ErrParamMismatch: the two xdproce ends were given different values for the same parameter.
var ErrParamMismatch = errors.New("parameters differ")

// Conn returns c wrapped so that the exchange functions run the recognition on it.
func (n *Negotiation) Conn(c net.Conn) net.Conn { return &negotiatingConn{Conn: c, n: n} }

type negotiatingConn struct {
	net.Conn
	n *Negotiation
}

// negotiation returns the Negotiation a connection carries, or nil.
func negotiation(c net.Conn) *Negotiation {
	if nc, ok := c.(*negotiatingConn); ok {
		return nc.n
	}
	return nil
}

// TagPSN is the first PSN an xdproce side announces: 24 bits of a SHA-256 over its QPN, GID,
// rkey and VA (0 and 0 for pingpong, whose message has neither), never 0.
func TagPSN(qpn uint32, gid GID, rkey uint32, va uint64) uint32 {
	var b [4 + 16 + 4 + 8]byte
	binary.BigEndian.PutUint32(b[:], qpn&0xffffff)
	copy(b[4:], gid[:])
	binary.BigEndian.PutUint32(b[20:], rkey)
	binary.BigEndian.PutUint64(b[24:], va)
	h := sha256.Sum256(append([]byte("xdproce-bench-psn\x00"), b[:]...))
	if v := uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2]); v != 0 {
		return v
	}
	return 1
}

func benchHello(n int) []byte {
	b := make([]byte, n)
	copy(b, benchHelloMagic)
	copy(b[len(benchHelloMagic):], strconv.Itoa(benchHelloVersion))
	return b
}

// isBenchHello reports whether an address message is the hello (the version is not checked
// here: the parameter exchange refuses another one with a line).
func isBenchHello(b []byte) bool { return bytes.HasPrefix(b, benchHelloMagic) }

// answerClient runs the server's part after it read the client's address message: a hello
// when the client is a tagging xdproce (then the parameter exchange, ending in *AgreedError or
// the mismatch), otherwise nothing (ok false: answer as the tool would).
func (n *Negotiation) answerClient(ctx context.Context, conn net.Conn, tagged bool, msgLen int) (ok bool, err error) {
	if !tagged {
		if n.Stock != nil {
			return false, n.Stock()
		}
		return false, nil
	}
	ctx, cancel := n.bound(ctx, conn)
	defer cancel()
	if _, err := conn.Write(benchHello(msgLen)); err != nil {
		return true, ctxErr(ctx, fmt.Errorf("cm: bench hello: %w", err))
	}
	var peer BenchParams
	if err := readFrame(conn, &peer); err != nil {
		return true, ctxErr(ctx, fmt.Errorf("cm: bench parameters from the client: %w", err))
	}
	agreed, rerr := n.resolve(peer)
	ans := paramAnswer{Params: agreed}
	if rerr != nil {
		ans = paramAnswer{Error: rerr.Error()}
	}
	if err := writeFrame(conn, ans); err != nil {
		return true, ctxErr(ctx, fmt.Errorf("cm: bench parameters to the client: %w", err))
	}
	if rerr != nil {
		// Wait (briefly) for the client to read the refusal and close, so that it gets the
		// reason rather than a reset.
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, conn)
		return true, rerr
	}
	return true, &AgreedError{Params: agreed}
}

// askServer runs the client's part after it read a hello where the server's address was
// expected: send this side's parameters, return the agreed ones as *AgreedError, or the
// server's refusal.
func (n *Negotiation) askServer(ctx context.Context, conn net.Conn, hello []byte) error {
	ctx, cancel := n.bound(ctx, conn)
	defer cancel()
	v := string(bytes.TrimRight(hello[len(benchHelloMagic):], "\x00"))
	if v != strconv.Itoa(benchHelloVersion) {
		return fmt.Errorf("cm: the xdproce server speaks bench negotiation version %q, this side %d: use the same xdproce release on both ends", v, benchHelloVersion)
	}
	if err := writeFrame(conn, n.Local); err != nil {
		return ctxErr(ctx, fmt.Errorf("cm: bench parameters to the server: %w", err))
	}
	var ans paramAnswer
	if err := readFrame(conn, &ans); err != nil {
		return ctxErr(ctx, fmt.Errorf("cm: bench parameters from the server: %w", err))
	}
	if ans.Error != "" {
		return fmt.Errorf("server: %s", strings.TrimPrefix(ans.Error, "cm: "))
	}
	p := ans.Params
	if p.Op != n.Local.Op || p.Size <= 0 || p.Iters <= 0 || p.QPs <= 0 {
		return fmt.Errorf("cm: bench parameters from the server: %w: %+v", ErrProtocol, p)
	}
	if err := n.checkMode(p); err != nil {
		return err
	}
	if err := n.checkTransport(p); err != nil {
		return err
	}
	return &AgreedError{Params: p}
}

// bound gives the parameter exchange its time limit, on the connection too.
func (n *Negotiation) bound(ctx context.Context, conn net.Conn) (context.Context, func()) {
	to := n.Timeout
	if to <= 0 {
		to = 10 * time.Second
	}
	return boundConn(ctx, conn, to)
}

// boundConn bounds ctx and conn by to; ctx's end ends conn's reads and writes too.
func boundConn(ctx context.Context, conn net.Conn, to time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithTimeout(ctx, to)
	conn.SetDeadline(time.Now().Add(to))
	stop := watchContext(ctx, conn)
	return ctx, func() { stop(); conn.SetDeadline(time.Time{}); cancel() }
}

// paramAnswer is the server's answer: the parameters both use, or why not.
type paramAnswer struct {
	Params BenchParams `json:"params"`
	Error  string      `json:"error,omitempty"`
}

// resolve agrees on the server's (n.Local) and the client's parameters: a value given on both
// command lines must be equal; otherwise the one given explicitly wins, and with neither the
// client's.
func (n *Negotiation) resolve(client BenchParams) (BenchParams, error) {
	srv := n.Local
	if client.Op != srv.Op {
		return BenchParams{}, fmt.Errorf("%w: the client runs %q, this server %q", ErrParamMismatch, client.Op, srv.Op)
	}
	out := BenchParams{Op: srv.Op}
	var diffs []string
	pick := func(name string, c, s any) any {
		switch cs, ss := client.isSet(name), srv.isSet(name); {
		case cs && ss && c != s:
			flag := n.Flags[name]
			if flag == "" {
				flag = "--" + name
			}
			diffs = append(diffs, fmt.Sprintf("client %s %v, server %s %v", flag, c, flag, s))
			return s
		case !cs && ss:
			return s
		}
		return c
	}
	out.Size = pick("size", client.Size, srv.Size).(int)
	out.Iters = pick("iters", client.Iters, srv.Iters).(int)
	out.QPs = pick("qps", client.QPs, srv.QPs).(int)
	out.SRQ = pick("srq", client.SRQ, srv.SRQ).(bool)
	out.UD = pick("ud", client.UD, srv.UD).(bool)
	out.Sweep = pick("sweep", client.Sweep, srv.Sweep).(bool)
	out.Seconds = pick("seconds", client.Seconds, srv.Seconds).(int)
	out.Calibrate = client.Calibrate
	if err := resolveMode(&out, client, srv, pick); err != nil {
		return BenchParams{}, err
	}
	resolveTransport(&out, client, srv)
	if out.Seconds > 0 && srv.isSet("iters") {
		diffs = append(diffs, "a duration (-D) and this server's --iters")
	}
	if out.Sweep && (client.isSet("size") || srv.isSet("size")) {
		diffs = append(diffs, "a size sweep (-a) and a size (--size) on the other side")
	}
	diffs = append(diffs, oooLimits(out)...)
	if len(diffs) > 0 {
		return BenchParams{}, fmt.Errorf("%w: %s", ErrParamMismatch, strings.Join(diffs, "; "))
	}
	if out.Size <= 0 || out.Iters <= 0 || out.QPs <= 0 {
		return BenchParams{}, fmt.Errorf("%w: the client asks for size %d, %d iterations, %d queue pairs", ErrProtocol, client.Size, client.Iters, client.QPs)
	}
	return out, nil
}

// maxParamFrame bounds a parameter frame; they are a few hundred bytes.
const maxParamFrame = 64 << 10

func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

// readFrame reads one frame unbuffered: the exchange goes on on the same connection after it.
func readFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return eofProtocol(err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxParamFrame {
		return fmt.Errorf("%w: frame of %d bytes", ErrProtocol, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return eofProtocol(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return nil
}
