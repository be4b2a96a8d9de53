package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
)

var sendCommand = &Command{
	Name:       "send",
	ShortUsage: "xdproce send --dev IF [--psk-file FILE] [--tls-fingerprint HEX [--tls-cert FILE --tls-key FILE]] [--tls-proxy PATH] [--name NAME] [--force] [--enlarge | --mode ooo [--paths N]] [--json] HOST FILE",
	ShortHelp:  "send a file to 'xdproce serve' on HOST by RDMA WRITE with immediate",
	LongHelp: `Send copies FILE to the server at HOST (an address, or address:port when the
server's control port is not 18515) by RDMA WRITE with immediate into a
pool of slots the server registered, a few megabytes a slot (package lmrm:
one LMRM_ALLOC for the pool, then one write per slot and no control message
per slot; the server hands slots back in batches of LMRM_RELEASE; a server
from before lmrm gets the older slot protocol, with one line on stderr
saying so). The server stores it in its
--dir as NAME (default: FILE's base name), under a temporary name until the
SHA-256 it computed matches the one sent here. The control connection is
retried for a few seconds while the server starts. A server run with
--psk-file needs the same key here (--psk-file), one run with
--tls-client-ca a client certificate (--tls-cert, --tls-key); an --insecure
server needs neither. An existing NAME on the server is replaced only with
--force, and only by a server run with --overwrite. When the server refuses
(a name it does not take, a full disk, ...), its reason is printed here.

With --enlarge the file goes through an enlargement channel instead (package
enlarge): one RC connection that starts with a 4 × 512 B ring on each side
(grown to 16 slots when a burst needs them) and promotes the sending direction along the ladder 512 B → 8 KiB → 128 KiB
only as the messages need it. The messages are sized so that a file of more
than 14,744 bytes climbs every step (up to 460 bytes go eagerly through the
ring, without promotion). At each promotion an ENLARGE_REQ goes in a ring
slot, the server frees its ring, registers the larger buffer and RDMA-writes
an ENLARGE_ACK into this side's mailbox, and only then does the data follow,
by RDMA WRITE with immediate into the new buffer. With --capture it is all in
the capture: 'xdproce dump' prints ENLARGE_REQ, ENLARGE_ACK and
ENLARGE_CREDIT with their fields. The SHA-256 check and the temporary file
are as without it; the result adds the phase reached, the promotions and the
bytes this side had registered.

With --mode ooo the file goes in OOO mode (docs/ooo.md): an OOO queue pair on
each side, this side's OOO WRITEs placed by the server in any order, no
retransmission by the transport; this side reissues an operation whose
completion does not come (a larger transaction id, a longer timeout each
time) and sizes operations from the loss it sees. The transfer ends with a
commit record (size, SHA-256) that this side's engine sends as a
conditional OOO WRITE the moment the last piece's completion comes back; a
lost piece cancels that commit and a fresh one follows the reissue. --paths N spreads each
operation's packets over N UDP source ports (ECMP; over --link udp the
source port is fixed: one path). The server must offer OOO mode (any xdproce
serve that knows it does, without a flag); one that does not is refused in
the hello with one line. The result adds the operations, retries, stale
completions, the loss estimate and the duplicate and stale packets this
side dropped (with --json an "ooo" object).

On a terminal a progress bar with rate and ETA goes to stderr. The result
goes to stdout: the size, the verified SHA-256, the throughput and the link
that carried it (with --json as one object: name, size, sha256, seconds,
gbps, link, peer_link, path_mtu, op, and with --enlarge an "enlarge" object:
phase, slot_size, promotions, control_sent, messages, registered_bytes).

EXAMPLES
  sudo xdproce send --dev eth1 --psk-file key 198.51.100.1 ./disk.img
  xdproce send --dev eth1 --link udp 198.51.100.1 notes.txt --name notes-v2.txt --force
  sudo xdproce send --dev eth1 --capture send.pcapng 198.51.100.1:9000 data.bin
  sudo xdproce send --dev eth1 --enlarge --capture f.pcapng 198.51.100.1 data.bin && xdproce dump f.pcapng
  sudo xdproce send --dev eth1 --tls-fingerprint 3f9a...c2 198.51.100.1 data.bin
  sudo xdproce send --dev eth1 --mode ooo --paths 4 --json 198.51.100.1 data.bin`,
	Setup: setupSend,
}

var getCommand = &Command{
	Name:       "get",
	ShortUsage: "xdproce get --dev IF [--psk-file FILE] [--tls-fingerprint HEX [--tls-cert FILE --tls-key FILE]] [--tls-proxy PATH] [--enlarge | --mode ooo] [--json] HOST NAME [FILE]",
	ShortHelp:  "fetch a file from 'xdproce serve' on HOST by RDMA WRITE with immediate",
	LongHelp: `Get fetches NAME from the --dir of the server at HOST, which RDMA-writes it
(with immediate) into a pool of slots this side registered, as send does
the other way (a server from before lmrm is read from by RDMA READ, with
one line on stderr saying so), and writes it to FILE (default: NAME in the
current directory; a directory means DIR/NAME). The data goes to a temporary
file beside FILE, renamed to FILE only once the SHA-256 of what arrived
matches the server's: a failed transfer leaves no partial file. Temporary
files that earlier gets left in that directory when they were killed
(.NAME.xdproce-PID-START-RANDOM.part of processes that are gone) are
removed first, and named on stderr. Authentication flags are as for send.

With --enlarge the server sends the file through an enlargement channel
instead, as 'send --enlarge' does the other way: the server's sending
direction starts on this side's 4 × 512 B ring and is promoted along the
ladder 512 B → 8 KiB → 128 KiB as its messages need it; each ENLARGE_REQ from
the server is answered from here (this side frees its ring, registers the
larger buffer and RDMA-writes an ENLARGE_ACK into the server's mailbox), and
'xdproce dump' of a --capture shows them. The result adds the phase the
direction reached, the promotions and the bytes this side had registered.

With --mode ooo this side fetches the file by OOO READs instead, retried and
sized as for 'send --mode ooo' (there is no --paths: a READ request is one
packet, and the server's responses leave from its queue pair's one port).

On a terminal a progress bar with rate and ETA goes to stderr; the result goes
to stdout (with --json as one object, as for send).

EXAMPLES
  sudo xdproce get --dev eth1 --psk-file key 198.51.100.1 disk.img
  sudo xdproce get --dev eth1 198.51.100.1 disk.img /tmp/copy.img
  sudo xdproce get --dev eth1 --enlarge --capture g.pcapng 198.51.100.1 data.bin && xdproce dump g.pcapng
  xdproce get --dev eth1 --link udp --json 198.51.100.1 notes.txt
  sudo xdproce get --dev eth1 --mode ooo 198.51.100.1 data.bin`,
	Setup: setupGet,
}

func setupSend(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	name := fs.String("name", "", "store the file on the server as `NAME` (default: FILE's base name)")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	retry := fs.Duration("connect-timeout", xfer.DefaultDialRetry, "how long to retry the control connection")
	enl := fs.Bool("enlarge", false, "send through an enlargement channel (small ring promoted 512 B → 8 KiB → 128 KiB as needed) instead of RDMA WRITE into a staging buffer")
	forceBar := fs.Bool("progress", false, "draw the progress bar on stderr even when it is not a terminal")
	force := fs.Bool("force", false, "replace a file of the same name on the server (which must run with --overwrite)")
	var mf modeFlags
	mf.register(fs, true)
	var rf relFlag
	rf.register(fs)
	var ccf ccFlag
	ccf.register(fs)
	var cf ctrlFlags
	cf.register(fs, false)
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce send"
		if len(args) != 2 {
			return usageErrorf(cmd, "want HOST FILE, got %d arguments", len(args))
		}
		host, path := args[0], args[1]
		if err := checkAddr(cmd, "HOST", host, false); err != nil {
			return err
		}
		ccfg, err := cf.config(cmd)
		if err != nil {
			return err
		}
		if *name == "" {
			*name = filepath.Base(path)
		}
		if err := xfer.ValidName(*name); err != nil {
			return usageErrorf(cmd, "--name: %v", err)
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("send: %s is not a regular file", path)
		}
		dev, err := openDevice(env, cmd, &df)
		if err != nil {
			return err
		}
		defer closeDevice(env, dev)
		ccfg.Retry = *retry
		if *force {
			ccfg.Require = []string{cm.CapOverwrite}
		}
		o := &xfer.Options{Log: env.Log, Force: *force}
		if err := mf.apply(cmd, o, ccfg, *enl); err != nil {
			return err
		}
		if err := ccf.apply(cmd, o); err != nil {
			return err
		}
		if err := rf.apply(cmd, o); err != nil {
			return err
		}
		conn, err := cm.Dial(ctx, host, ccfg)
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		bar := newProgress(env.Stderr, *name, *forceBar)
		if bar != nil {
			o.Progress = bar.update
		}
		if *enl {
			o.Enlarge = xfer.DefaultEnlargeConfig()
		}
		res, err := xfer.Send(ctx, dev.Device, conn, f, st.Size(), *name, o)
		bar.finish()
		if err != nil {
			return fmt.Errorf("send %s: %w", path, interrupted(ctx, err))
		}
		return printResult(env, *jsonOut, "sent", path, res)
	}
}

func setupGet(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	retry := fs.Duration("connect-timeout", xfer.DefaultDialRetry, "how long to retry the control connection")
	enl := fs.Bool("enlarge", false, "have the server send through an enlargement channel (this side's small ring promoted 512 B → 8 KiB → 128 KiB as needed) instead of RDMA READ from its staging buffer")
	var mf modeFlags
	mf.register(fs, false)
	var rf relFlag
	rf.register(fs)
	var ccf ccFlag
	ccf.register(fs)
	var cf ctrlFlags
	cf.register(fs, false)
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce get"
		if len(args) != 2 && len(args) != 3 {
			return usageErrorf(cmd, "want HOST NAME [FILE], got %d arguments", len(args))
		}
		host, name := args[0], args[1]
		if err := checkAddr(cmd, "HOST", host, false); err != nil {
			return err
		}
		ccfg, err := cf.config(cmd)
		if err != nil {
			return err
		}
		if err := xfer.ValidName(name); err != nil {
			return usageErrorf(cmd, "NAME: %v", err)
		}
		dst := name
		if len(args) == 3 {
			dst = args[2]
			if st, err := os.Stat(dst); err == nil && st.IsDir() {
				dst = filepath.Join(dst, name)
			}
		}
		if st, err := os.Stat(filepath.Dir(dst)); err != nil || !st.IsDir() {
			return fmt.Errorf("get: %s: directory does not exist", filepath.Dir(dst))
		}
		removeStale(env, filepath.Dir(dst))
		dev, err := openDevice(env, cmd, &df)
		if err != nil {
			return err
		}
		defer closeDevice(env, dev)
		ccfg.Retry = *retry
		o := &xfer.Options{Log: env.Log}
		if err := mf.apply(cmd, o, ccfg, *enl); err != nil {
			return err
		}
		if err := ccf.apply(cmd, o); err != nil {
			return err
		}
		if err := rf.apply(cmd, o); err != nil {
			return err
		}
		conn, err := cm.Dial(ctx, host, ccfg)
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		bar := newProgress(env.Stderr, name, false)
		if bar != nil {
			o.Progress = bar.update
		}
		if *enl {
			o.Enlarge = xfer.DefaultEnlargeConfig()
		}
		res, err := xfer.Get(ctx, dev.Device, conn, name, dst, o)
		bar.finish()
		if err != nil {
			return fmt.Errorf("get %s: %w", name, interrupted(ctx, err))
		}
		return printResult(env, *jsonOut, "received", dst, res)
	}
}

// removeStale removes the temporary files of killed receivers from dir
// (xfer.RemoveStale: only xdproce's own names, only of processes that are
// gone) and says which on stderr.
func removeStale(env *Env, dir string) {
	removed, err := xfer.RemoveStale(dir)
	if err != nil {
		env.Log.Warn("stale temporary files", "dir", dir, "err", err)
	}
	for _, name := range removed {
		fmt.Fprintf(env.Stderr, "removed %s (left by a transfer whose receiver died)\n", filepath.Join(dir, name))
	}
}

func closeDevice(env *Env, dev *device) {
	st := dev.Stats()
	env.Log.Debug("device stats", "tx_frames", st.TxFrames, "tx_bytes", st.TxBytes, "rx_frames", st.RxFrames,
		"rx_bytes", st.RxBytes, "drop_bad_icrc", st.DropBadICRC, "drop_malformed", st.DropMalformed,
		"drop_unknown_qpn", st.DropUnknownQPN, "retransmits", st.Retransmits, "timeouts", st.Timeouts,
		"seq_naks", st.SeqNAKs, "duplicates", st.Duplicates, "qp_dropped", st.QPDropped)
	if err := dev.Close(); err != nil {
		env.Log.Warn("close device", "err", err)
	}
	if dev.capName != "" {
		fmt.Fprintf(env.Stderr, "capture written to %s\n", dev.capName)
	}
}

// interrupted names Ctrl-C as the reason when the context ended.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded)) {
		return errors.New("interrupted")
	}
	return err
}

func printResult(env *Env, asJSON bool, verb, path string, res xfer.Result) error {
	if asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(env.Stdout, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(env.Stdout, "%s %s (%s): %d bytes, sha256 %s verified; %.2f Gb/s in %v by %s over %s, path MTU %d\n",
		verb, path, res.Name, res.Size, res.SHA256, res.Gbps, res.Elapsed.Round(time.Millisecond), res.Op, res.Link, res.PathMTU)
	if err == nil && res.Enlarge != nil {
		err = printEnlarge(env, res.Enlarge)
	}
	if err == nil && res.OOO != nil && res.Op == xfer.OpOOO3P {
		err = printCopy(env, &res)
	} else if err == nil && res.OOO != nil {
		err = printOOO(env, res.OOO)
	}
	if l := reliabilityLine(res.Reliability); err == nil && l != "" {
		_, err = fmt.Fprint(env.Stdout, l)
	}
	if l := ccLine(res.CC); err == nil && l != "" {
		_, err = fmt.Fprint(env.Stdout, l)
	}
	return err
}

// printEnlarge is the second result line of a transfer through an
// enlargement channel.
func printEnlarge(env *Env, e *xfer.EnlargeResult) error {
	_, err := fmt.Fprintf(env.Stdout, "enlarge: phase %d (%d B slots) after %d promotions, %d control messages, %d messages, %d B registered here\n",
		e.Phase, e.SlotSize, e.Promotions, e.ControlSent, e.Messages, e.Registered)
	return err
}
