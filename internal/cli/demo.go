package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

var demoCommand = &Command{
	Name:       "demo",
	ShortUsage: "xdproce demo [--size N] [--link xsk|udp] [--capture FILE] [--mtu N] [--enlarge]",
	ShortHelp:  "send a file between two network namespaces over RoCEv2 and verify it",
	LongHelp: `Demo shows the whole stack on one machine. As root it builds its own lab: two
network namespaces joined by a veth pair (198.51.100.1 and 198.51.100.2,
MTU --mtu), runs 'xdproce serve' in one and 'xdproce send' in the other, and
sends --size bytes of random data by RDMA WRITE (serve authenticating send
with a pre-shared key the demo makes for the run, in its work directory).
It then checks that the
SHA-256 of the file on disk matches what was sent, prints which link carried
the frames ("AF_XDP (native)" or "UDP"), the throughput, and where the
sender's pcapng capture was written, and removes the lab and its files on
every exit: success, failure, Ctrl-C, SIGTERM, or a closed stdout
('xdproce demo | head -n 1'). Labs and work directories left by a demo that
was killed outright (SIGKILL) are removed by the next demo.

Without root (no network namespaces, no AF_XDP) it says so and runs the same
transfer between two devices over kernel UDP sockets on 127.0.0.1 and
127.0.0.2 in this process.

The capture holds every frame: 'xdproce dump --verify FILE' checks every
ICRC, and Wireshark decodes it (RoCEv2 on UDP port 4791). By default it goes
to a new file per run, $TMPDIR/xdproce-demo-*.pcapng (the path is printed);
--capture FILE names one, --capture "" turns it off. A capture that cannot be
read back fails the demo.

With --enlarge the file goes through an enlargement channel ('send
--enlarge'): the sending direction starts on the server's 4 × 512 B ring
(16 slots once a burst needs them) and is promoted 512 B → 8 KiB → 128 KiB
as the messages need it. The demo then prints the promotions, each
ENLARGE_REQ and ENLARGE_ACK with its frame and fields as 'xdproce dump'
names them (an RC retransmission of one marked as such), read from the
capture (with --capture "" it still captures, into its work directory,
removed at exit), and the phase the channel reached.

EXAMPLES
  sudo make demo
  sudo xdproce demo --size 256MiB
  sudo xdproce demo --link udp --capture /tmp/udp.pcapng
  sudo xdproce demo --enlarge --size 4MiB
  xdproce demo --size 8MiB`,
	Setup: setupDemo,
}

func setupDemo(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	size := Size(64 << 20)
	fs.Var(&size, "size", "bytes to send (4096, 64KiB, 1MiB, 2GiB)")
	var lf linkFlag
	lf.kind = roce.LinkXSK
	fs.Var(&lf, "link", "frame `path` in the lab: xsk (AF_XDP) or udp (kernel UDP sockets)")
	capPath := fs.String("capture", defaultCapture, "write the sender's frames to `FILE` (pcapng); empty for none; default a new $TMPDIR/xdproce-demo-*.pcapng")
	mtu := fs.Int("mtu", 9000, "MTU of the lab's veth pair (1500: path MTU 1024; 9000: path MTU 4096)")
	enl := fs.Bool("enlarge", false, "send through an enlargement channel and print its promotions (ENLARGE_REQ, ENLARGE_ACK)")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce demo"
		if len(args) != 0 {
			return usageErrorf(cmd, "unexpected argument %q", args[0])
		}
		if size < 0 || size > 16<<30 {
			return usageErrorf(cmd, "--size %s: want at most 16GiB", size.String())
		}
		if lf.kind == roce.LinkAuto {
			lf.kind = roce.LinkXSK
		}
		if *mtu < 1280 || *mtu > 9000 {
			return usageErrorf(cmd, "--mtu %d: want 1280 to 9000", *mtu)
		}
		d := &demo{env: env, size: int64(size), link: lf.kind, capPath: *capPath, mtu: *mtu, enlarge: *enl}
		return d.run(ctx)
	}
}

// defaultCapture stands for "a new capture file for this run".
const defaultCapture = "\x00per-run"

type demo struct {
	env     *Env
	size    int64
	link    roce.LinkKind
	capPath string
	mtu     int
	enlarge bool   // through an enlargement channel (--enlarge)
	capWork bool   // the capture is in work: made for --enlarge's promotions only
	work    string // temporary directory
	srcSum  string
	cancel  context.CancelFunc // stops the run when stdout is gone
	outErr  error              // the first failed write to stdout
	pskFile string             // the run's own pre-shared key, in work
	psk     []byte
}

// say prints a line on stdout. When stdout is a closed pipe ('demo | head')
// the run is cancelled so that it cleans up at once instead of finishing
// a transfer nobody sees.
func (d *demo) say(format string, args ...any) {
	if _, err := fmt.Fprintf(d.env.Stdout, format+"\n", args...); err != nil && d.outErr == nil {
		d.outErr = err
		if d.cancel != nil {
			d.cancel()
		}
	}
}

func (d *demo) run(ctx context.Context) (err error) {
	ctx, d.cancel = context.WithCancel(ctx)
	defer d.cancel()
	// A run whose report could not be printed failed, even if the transfer
	// finished first (its capture goes with it).
	defer func() {
		if err == nil && d.outErr != nil {
			err = fmt.Errorf("demo: stdout: %w", d.outErr)
		}
	}()
	// A write to a closed stdout must come back as EPIPE, not kill the
	// process with SIGPIPE before the lab is removed.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	reapDemoDirs(d.env)
	work, err := os.MkdirTemp("", demoDirPrefix(os.Getpid()))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.work = work
	defer os.RemoveAll(work)
	if d.capPath == defaultCapture {
		f, cerr := os.CreateTemp("", "xdproce-demo-*.pcapng")
		if cerr != nil {
			return fmt.Errorf("demo: capture: %w", cerr)
		}
		f.Close()
		d.capPath = f.Name()
		// A run that fails leaves no capture of its own behind.
		defer func() {
			if err != nil || d.outErr != nil {
				os.Remove(d.capPath)
			}
		}()
	}
	if d.enlarge && d.capPath == "" {
		d.capPath, d.capWork = filepath.Join(work, "enlarge.pcapng"), true
		d.say("--enlarge reads its promotions from a capture: capturing into the work directory (removed at exit)")
	}
	src := filepath.Join(work, "demo.bin")
	if d.srcSum, err = writeRandom(src, d.size); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// A key of its own for this run, in the run's directory: the server it
	// starts authenticates its client like any other.
	d.pskFile = filepath.Join(work, "psk")
	if d.psk, err = cm.WritePSK(d.pskFile); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if why := demoUnprivileged(); why != "" {
		d.say("not running as root (%s): no network namespaces or AF_XDP,\n"+
			"so the demo runs the same transfer over kernel UDP sockets on loopback (127.0.0.1 → 127.0.0.2)", why)
		return d.loopback(ctx, src)
	}
	return d.lab(ctx, src)
}

// demoUnprivileged says why the process cannot build a lab ("" when it can).
func demoUnprivileged() string {
	if os.Geteuid() != 0 {
		return "euid " + fmt.Sprint(os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "no 'ip' command (iproute2)"
	}
	return ""
}

// lab runs serve and send as child processes in two namespaces.
func (d *demo) lab(ctx context.Context, src string) (err error) {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: own executable: %w", err)
	}
	topo, err := netlab.NewPair(netlab.LinkConfig{MTU: d.mtu})
	if err != nil {
		return withPermissionHint(fmt.Errorf("demo: build lab: %w", err))
	}
	defer func() {
		if cerr := topo.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("demo: remove lab: %w", cerr)
		} else if cerr == nil {
			d.say("lab removed")
		}
	}()
	srv, cli := topo.A, topo.B
	d.say("lab: namespaces %s (%s, %v) and %s (%s, %v), veth MTU %d",
		srv.NS.Name, srv.Name, srv.IPv4, cli.NS.Name, cli.Name, cli.IPv4, d.mtu)
	if err := srv.Up(3 * time.Second); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := cli.Up(3 * time.Second); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	outDir := filepath.Join(d.work, "received")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	linkArg := "xsk"
	if d.link == roce.LinkUDP {
		linkArg = "udp"
	}
	ctrlAddr := netip.AddrPortFrom(srv.IPv4, xfer.DefaultPort).String()

	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	server := srv.NS.Command(sctx, exe, "serve", "--dev", srv.Name, "--dir", outDir, "--link", linkArg,
		"--listen", ctrlAddr, "--json", "--psk-file", d.pskFile)
	var serverOut, serverErr bytes.Buffer
	server.Stdout, server.Stderr = &serverOut, &serverErr
	server.SysProcAttr = dieWithParent()
	server.Cancel = func() error { return server.Process.Signal(os.Interrupt) }
	server.WaitDelay = 3 * time.Second
	if err := server.Start(); err != nil {
		return fmt.Errorf("demo: start server: %w", err)
	}
	serverDone := make(chan error, 1)
	go func() { serverDone <- server.Wait() }()
	defer func() {
		stopServer()
		<-serverDone
	}()

	sendArgs := []string{"send", "--dev", cli.Name, "--link", linkArg, "--name", "demo.bin", "--json", "--connect-timeout", "10s",
		"--psk-file", d.pskFile}
	var clientErr bytes.Buffer
	clientStderr := io.Writer(&clientErr)
	if isTerminal(d.env.Stderr) {
		// The sender's progress bar, passed through.
		sendArgs = append(sendArgs, "--progress")
		clientStderr = io.MultiWriter(d.env.Stderr, &clientErr)
	}
	if d.capPath != "" {
		sendArgs = append(sendArgs, "--capture", d.capPath)
	}
	if d.enlarge {
		sendArgs = append(sendArgs, "--enlarge")
	}
	sendArgs = append(sendArgs, srv.IPv4.String(), src)
	client := cli.NS.Command(ctx, exe, sendArgs...)
	var clientOut bytes.Buffer
	client.Stdout, client.Stderr = &clientOut, clientStderr
	client.SysProcAttr = dieWithParent()
	client.Cancel = func() error { return client.Process.Signal(os.Interrupt) }
	client.WaitDelay = 3 * time.Second
	d.say("sending %s of random data from %v to %v %s ...", humanBytes(d.size), cli.IPv4, srv.IPv4, d.how())
	cerr := client.Run()
	if ctx.Err() != nil {
		return errors.New("demo: interrupted")
	}
	if cerr != nil {
		select {
		case <-serverDone:
			serverDone <- nil
			return fmt.Errorf("demo: server exited: %s", lastLine(serverErr.String()))
		default:
		}
		return fmt.Errorf("demo: send failed: %s", lastLine(clientErr.String()))
	}
	var res xfer.Result
	if err := json.Unmarshal(clientOut.Bytes(), &res); err != nil {
		return fmt.Errorf("demo: send printed %q: %w", clientOut.String(), err)
	}
	return d.report(res, filepath.Join(outDir, "demo.bin"))
}

// loopback runs the transfer in this process over link/udp on 127.0.0.1 and
// 127.0.0.2.
func (d *demo) loopback(ctx context.Context, src string) error {
	var capFile *os.File
	var capBuf *bufio.Writer
	var capW io.Writer
	if d.capPath != "" {
		f, err := os.Create(d.capPath)
		if err != nil {
			return fmt.Errorf("demo: capture: %w", err)
		}
		capFile, capBuf = f, bufio.NewWriterSize(f, 1<<20)
		capW = capBuf
		defer capFile.Close()
	}
	a, b, err := xfer.LoopbackPair(0, capW)
	if errors.Is(err, syscall.EADDRINUSE) {
		a, b, err = xfer.LoopbackPair(30000+os.Getpid()%20000, capW)
	}
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	closed := false
	closeDevs := func() {
		if !closed {
			closed = true
			a.Close()
			b.Close()
			if capBuf != nil {
				capBuf.Flush()
			}
		}
	}
	defer closeDevs()
	outDir := filepath.Join(d.work, "received")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	ln, err := cm.Listen(netip.AddrPortFrom(xfer.LoopbackB, 0).String(), &cm.Config{PSK: d.psk})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	sctx, stop := context.WithCancel(ctx)
	serverDone := make(chan error, 1)
	srv := &xfer.Server{Dev: b, Dir: outDir, Options: &xfer.Options{Log: d.env.Log}}
	go func() { serverDone <- srv.Serve(sctx, ln) }()
	defer func() { stop(); <-serverDone }()
	conn, err := cm.Dial(ctx, ln.Addr().String(), &cm.Config{Retry: 5 * time.Second, PSK: d.psk})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer f.Close()
	d.say("sending %s of random data from %v to %v %s ...", humanBytes(d.size), xfer.LoopbackA, xfer.LoopbackB, d.how())
	o := &xfer.Options{Log: d.env.Log}
	if d.enlarge {
		o.Enlarge = xfer.DefaultEnlargeConfig()
	}
	res, err := xfer.Send(ctx, a, conn, f, d.size, "demo.bin", o)
	if err != nil {
		return fmt.Errorf("demo: send: %w", interrupted(ctx, err))
	}
	stop()
	<-serverDone
	serverDone <- nil
	closeDevs()
	return d.report(res, filepath.Join(outDir, "demo.bin"))
}

// report checks the received file and prints the outcome.
func (d *demo) report(res xfer.Result, received string) error {
	got, err := fileSum(received)
	if err != nil {
		return fmt.Errorf("demo: received file: %w", err)
	}
	if res.SHA256 != d.srcSum || got != d.srcSum {
		return fmt.Errorf("demo: checksum mismatch: source %s, sender %s, received file %s", d.srcSum, res.SHA256, got)
	}
	d.say("sha256 %s verified: source, sender, receiver and the file on disk agree", d.srcSum)
	d.say("link: %s (receiver: %s), path MTU %d, %s", res.Link, res.Peer, res.PathMTU, res.Op)
	el := time.Duration(res.Seconds * float64(time.Second))
	d.say("throughput: %.2f Gb/s (%s in %v)", res.Gbps, humanBytes(res.Size), el.Round(time.Millisecond))
	if d.capPath != "" {
		n, bad, err := countCapture(d.capPath)
		switch {
		case err != nil:
			return fmt.Errorf("demo: capture %s is unreadable: %w", d.capPath, err)
		case n == 0:
			return fmt.Errorf("demo: capture %s holds no RoCE frame", d.capPath)
		case bad > 0:
			return fmt.Errorf("demo: capture %s: %d of %d RoCE frames do not verify", d.capPath, bad, n)
		case d.capWork:
			d.say("capture: %d RoCE frames, every ICRC good", n)
		default:
			d.say("capture: %s (%d RoCE frames, every ICRC good; 'xdproce dump %s | less')", d.capPath, n, d.capPath)
		}
	}
	if d.enlarge {
		return d.promotions(res.Enlarge)
	}
	return nil
}

// writeRandom writes n pseudo-random bytes to path and returns their SHA-256.
func writeRandom(path string, n int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var seed [32]byte
	binaryTime := time.Now().UnixNano()
	for i := range 8 {
		seed[i] = byte(binaryTime >> (8 * i))
	}
	rng := rand.NewChaCha8(seed)
	h := sha256.New()
	buf := make([]byte, 1<<20)
	w := bufio.NewWriterSize(f, 1<<20)
	for left := n; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		rng.Read(b)
		h.Write(b)
		if _, err := w.Write(b); err != nil {
			return "", err
		}
		left -= int64(len(b))
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// countCapture counts the RoCE frames of a capture and those that do not
// decode with a good ICRC.
func countCapture(path string) (roceFrames, bad int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	r, err := capture.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return 0, 0, err
	}
	var fr capture.Frame
	var p wire.Packet
	for {
		if err := r.Next(&fr); err != nil {
			if errors.Is(err, io.EOF) {
				return roceFrames, bad, nil
			}
			return roceFrames, bad, err
		}
		err := p.Decode(fr.Data)
		if errors.Is(err, wire.ErrNotRoCE) {
			continue
		}
		roceFrames++
		if err != nil {
			bad++
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no message"
	}
	return strings.TrimPrefix(s, "xdproce: ")
}
