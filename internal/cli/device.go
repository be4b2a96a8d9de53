package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/roce"
)

// permissionHint says how to get the capabilities AF_XDP uses that the
// process lacks ("missing CAP_BPF; run as root, or ..."), leaving out those
// that msg, the error it ends, already names; "" when the process has them
// all: then a refusal has another cause, which setcap would not fix.
func permissionHint(msg string) string {
	missing := roce.MissingCapabilities()
	if len(missing) == 0 {
		return ""
	}
	var unnamed []string
	for _, c := range missing {
		if !strings.Contains(msg, c) {
			unnamed = append(unnamed, c)
		}
	}
	bin := "bin/xdproce"
	if p, err := os.Executable(); err == nil {
		bin = p
	}
	hint := "run as root, or give the binary the capabilities AF_XDP uses " +
		"(sudo setcap cap_net_admin,cap_net_raw,cap_bpf,cap_ipc_lock+ep " + bin + "), or use --link udp"
	if len(unnamed) > 0 {
		hint = "missing " + strings.Join(unnamed, ", ") + "; " + hint
	}
	return hint
}

// linkFlag is --link auto|xsk|udp|daemon.
type linkFlag struct{ kind roce.LinkKind }

func (l *linkFlag) String() string {
	if l == nil {
		return "auto"
	}
	return l.kind.String()
}

func (l *linkFlag) Set(s string) error {
	k, err := roce.ParseLinkKind(s)
	if err != nil {
		return fmt.Errorf("unknown link %q (want auto, xsk, udp or daemon)", s)
	}
	l.kind = k
	return nil
}

// cpuFlag is --cpu LIST: CPUs as "3", "2,3" or "0-3,8".
type cpuFlag struct{ cpus []int }

func (c *cpuFlag) String() string {
	if c == nil || len(c.cpus) == 0 {
		return ""
	}
	parts := make([]string, len(c.cpus))
	for i, n := range c.cpus {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (c *cpuFlag) Set(s string) error {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(lo)
		b := a
		var errB error
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		if errA != nil || errB != nil || a < 0 || b < a || b > 4095 {
			return fmt.Errorf("bad CPU list %q (want CPU numbers and ranges such as 3, 2,3 or 0-3)", s)
		}
		for n := a; n <= b; n++ {
			cpus = append(cpus, n)
		}
	}
	c.cpus = cpus
	return nil
}

// busyPollFlag is --busy-poll auto|0|DURATION; 0 (the zero value: sleep
// when idle) is the default. auto (roce.BusyPollAuto) is opt-in: on the
// 2-core development machine it reached the ping-relative latency target
// only some of the time, and a spinning engine competes with whatever
// else runs there (docs/status.md, "Adaptive busy polling").
type busyPollFlag struct {
	d time.Duration
}

func (b *busyPollFlag) value() time.Duration {
	if b == nil {
		return 0
	}
	return b.d
}

func (b *busyPollFlag) String() string {
	if b.value() == roce.BusyPollAuto {
		return "auto"
	}
	return b.value().String()
}

func (b *busyPollFlag) Set(s string) error {
	if s == "auto" {
		*b = busyPollFlag{d: roce.BusyPollAuto}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("bad busy-poll %q (want auto, 0 or a duration such as 50us)", s)
	}
	*b = busyPollFlag{d: d}
	return nil
}

// deviceFlags are the flags of the commands that open a device.
type deviceFlags struct {
	dev      string
	link     linkFlag
	daemon   string
	capture  string
	cpu      cpuFlag
	busyPoll busyPollFlag
	engines  int
}

func (d *deviceFlags) register(fs *flag.FlagSet, needDev bool) {
	if needDev {
		fs.StringVar(&d.dev, "dev", "", "network `interface` to run RoCEv2 on (required)")
	}
	fs.Var(&d.link, "link", "frame `path`: auto (the xdproce daemon serving the interface, else the fastest link there: kernel UDP with GSO on veth and NICs without zero-copy AF_XDP, AF_XDP on a NIC with zero-copy AF_XDP; 'xdproce info' says which and why), xsk (AF_XDP only), udp or daemon")
	fs.StringVar(&d.daemon, "daemon", "", "attach to the xdproce daemon listening on `PATH` (default $XDPROCE_DAEMON, else the one serving --dev)")
	fs.StringVar(&d.capture, "capture", "", "write every RoCE frame sent and received to `FILE` (pcapng; read it with 'xdproce dump' or Wireshark)")
	fs.Var(&d.busyPoll, "busy-poll", "poll the link instead of sleeping: 0 (never: sleep when idle, the default), auto (spin briefly after sending, tuned from recent round trips, and while frames flow) or a `DURATION` after the last activity (e.g. 50us)")
	fs.IntVar(&d.engines, "engines", 1, "progress threads: `N` engines, each receiving and sending on its share of the interface's rx queues and running its share of the queue pairs (AF_XDP with at least N queues; other links refuse more than 1)")
	fs.Var(&d.cpu, "cpu", "pin the device's progress thread to the CPUs in `LIST` (e.g. 3 or 2-3): a CPU of its own speeds up transfers; default: unpinned")
}

// device is an open roce.Device with its capture file and stat socket.
type device struct {
	*roce.Device
	capFile *os.File
	capName string
	stat    *stat.Server
	procs   func() // gives back engineProcs's Ps
}

// openDevice opens the interface of the flags, logs which link it chose and
// why (at info level) and opens its stat socket (which 'xdproce stat' reads;
// a device without one is a warning). cmd names the command for usage errors
// and in the stat socket's replies.
func openDevice(env *Env, cmd string, d *deviceFlags) (*device, error) {
	if d.dev == "" {
		return nil, usageErrorf(cmd, "--dev IF is required")
	}
	viaDaemon := d.daemon != "" || d.link.kind == roce.LinkDaemon
	if _, err := net.InterfaceByName(d.dev); err != nil && !viaDaemon {
		return nil, fmt.Errorf("unknown interface %q (see 'ip link' or 'xdproce info')", d.dev)
	}
	out := &device{}
	o := &roce.Options{Link: d.link.kind, Daemon: d.daemon, CPUs: d.cpu.cpus, BusyPoll: d.busyPoll.value(), Engines: d.engines}
	if d.daemon != "" && d.link.kind == roce.LinkAuto {
		o.Link = roce.LinkDaemon
	}
	if d.capture != "" {
		f, err := os.Create(d.capture)
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		// The device's capture writer buffers: FlushCapture writes what it
		// holds to the file.
		out.capFile, out.capName = f, d.capture
		o.Capture = f
	}
	dev, err := roce.Open(d.dev, o)
	if err != nil {
		if out.capFile != nil {
			out.capFile.Close()
			os.Remove(out.capName)
		}
		return nil, withPermissionHint(err)
	}
	out.Device = dev
	n, release := engineProcs(d.engines)
	out.procs = release
	if n > 0 {
		env.Log.Debug("GOMAXPROCS raised: each engine's wait holds a P", "gomaxprocs", n, "engines", max(d.engines, 1))
	}
	env.Log.Info("link chosen", "dev", d.dev, "link", dev.LinkName(), "asked", d.link.String(), "reason", dev.LinkReason())
	out.stat, err = stat.Listen(dev, d.dev, strings.TrimPrefix(cmd, "xdproce "))
	if err != nil {
		env.Log.Warn("xdproce stat cannot see this process", "err", err)
	}
	return out, nil
}

// Close closes the device and then its capture file.
func (d *device) Close() error {
	if d.stat != nil {
		d.stat.Close()
	}
	err := d.Device.Close()
	if d.procs != nil {
		d.procs()
	}
	if d.capFile != nil {
		if cerr := d.capFile.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("capture: %w", cerr)
		}
	}
	return err
}

// withPermissionHint appends how to get the privileges an error lacked.
func withPermissionHint(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, roce.ErrHeld) {
		return err
	}
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "operation not permitted") {
		if hint := permissionHint(err.Error()); hint != "" {
			return fmt.Errorf("%w; %s", err, hint)
		}
	}
	return err
}

// progressBar draws "[=====>    ]  45%  28.8/64.0 MiB  2.31 Gb/s  ETA 0:02"
// on a terminal, at most ten times a second.
type progressBar struct {
	w     io.Writer
	label string
	start time.Time
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, label string, force bool) *progressBar {
	if !force && !isTerminal(w) {
		return nil
	}
	return &progressBar{w: w, label: label, start: time.Now()}
}

// update is an xfer.Options.Progress function.
func (p *progressBar) update(done, total int64) {
	now := time.Now()
	if done < total && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	const width = 24
	bar := strings.Repeat("=", int(frac*width))
	if len(bar) < width {
		bar += ">" + strings.Repeat(" ", width-len(bar)-1)
	}
	el := now.Sub(p.start).Seconds()
	rate, eta := 0.0, "--:--"
	if el > 0 && done > 0 {
		rate = float64(done) * 8 / el / 1e9
		left := time.Duration(float64(total-done) / (float64(done) / el) * float64(time.Second))
		eta = fmt.Sprintf("%d:%02d", int(left.Minutes()), int(left.Seconds())%60)
	}
	fmt.Fprintf(p.w, "\r%s [%s] %3.0f%%  %s/%s  %.2f Gb/s  ETA %s ", p.label, bar, frac*100,
		humanBytes(done), humanBytes(total), rate, eta)
	p.drawn = true
}

// finish ends the bar's line.
func (p *progressBar) finish() {
	if p != nil && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// humanBytes writes n with a binary unit and one decimal: "64.0 MiB".
func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
