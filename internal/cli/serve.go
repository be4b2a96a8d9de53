package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cm/ktls"
	"github.com/xdproce/xdproce/internal/xfer"
)

var serveCommand = &Command{
	Name:       "serve",
	ShortUsage: "xdproce serve --dev IF (--psk-file FILE | --tls-client-ca FILE | --insecure) [--dir DIR] [--listen ADDR] [--tls [--tls-cert FILE --tls-key FILE | --tls-dir DIR] | --tls-proxy PATH] [--overwrite] [--link auto|xsk|udp|daemon] [--daemon PATH] [--capture FILE]",
	ShortHelp:  "accept file transfers (send, get) from authenticated peers",
	LongHelp: `Serve attaches to the interface at start-up (to the xdproce daemon serving
it when there is one, else the link --link auto picks there, which
'xdproce info' names: kernel UDP sockets with GSO on veth, AF_XDP with
the XDP steering program on a NIC with zero-copy AF_XDP; --link chooses) and accepts
requests from other xdproce processes on a TCP control port (default 18515):
files sent with 'xdproce send' land as DIR/NAME, and files asked for with
'xdproce get' are read from DIR. 'xdproce copy' on a third machine uses two
servers: the source registers the file and streams it straight to the sink
by third-party RDMA, acting only for that client's queue pair (docs/ooo.md).
It does not serve benchmarks: 'xdproce
bench' and 'xdproce pingpong' run against a server of their own (run the
same command without HOST on the other machine), and a bench or pingpong
client that reaches serve is told so.

Clients authenticate before anything else passes: with --psk-file, both
sides prove they hold the same key (an HMAC challenge each way; the key
never goes on the wire); with --tls-client-ca, clients present a TLS
certificate signed by that CA. Without either serve refuses to start unless
--insecure says that anyone who reaches the control port may read and write
DIR. The authentication keys are only ever the ones on the command line.

Every name is opened beneath DIR (Go's os.Root): a symbolic link in DIR is
followed while it stays inside and refused when it leads out. Names with
directories, a leading dot or control characters are refused. An existing
file is replaced only when serve runs with --overwrite and the client sends
with --force; otherwise the client is told the file exists. A put larger
than the free space of DIR's file system is refused before any data moves,
and the client prints the server's reason.

With --tls and no --tls-cert, the self-signed certificate is kept in
--tls-dir (made on first use), so its fingerprint, which clients pin, stays
the same across restarts. A client that speaks plain TCP to a TLS server is
told so, with the fingerprint to pin.

With --tls-proxy PATH the TLS handshakes run in 'xdproce tls-proxy' (see its
help), which holds the certificate and key; serve relays the handshake and
then encrypts and decrypts the connection itself, in kernel TLS where the
kernel has it, and says which at start-up. It goes with --psk-file or
--insecure, not with --tls or --tls-client-ca.

A received file is written under a temporary name in DIR and renamed to NAME
only when it is complete and its SHA-256 matches the sender's: a partial
file never appears under the final name. Nothing is flushed to disk while
the data moves; the file is synced once (fsync) after the check and
before the rename, so a file under its final name is on disk. The
SHA-256 is computed on a goroutine of its own that reads back what was
written, so a slot goes back to the sender as soon as it is written. The
temporary name,
  DIR/.NAME.xdproce-PID-START-RANDOM.part,
names the receiving process (its PID and start time). A server that is
killed cannot remove its temporary files; at start-up serve removes those in
DIR whose process is gone (and unowned ones from older versions untouched
for 10 minutes), keeps those of transfers still running, and says on stderr
what it removed.

Transfers sent with 'xdproce send --enlarge' go through an enlargement
channel (package enlarge) instead of an lmrm pool (RDMA WRITE with immediate
into slots serve registered, one LMRM_ALLOC per transfer); serve accepts
both, and serves clients from before lmrm the older slot protocol (one line
on stderr each time).

Serve prints one line per finished request on stdout, plus a line "enlarge:
phase, promotions, ..." for a transfer through an enlargement channel (with
--json one JSON object per line: op, name, size, sha256, seconds, gbps, link,
peer_link, path_mtu, error, and an "enlarge" object) and runs until
interrupted (Ctrl-C). 'xdproce stat' shows its counters meanwhile, --metrics ADDR
serves them to Prometheus, and a --capture file is flushed after each request,
so it can be read while serve runs.

EXAMPLES
  head -c 32 /dev/urandom | base64 > key && chmod 600 key   # copy it to the clients
  sudo xdproce serve --dev eth1 --psk-file key --dir /srv/incoming
  xdproce serve --dev eth1 --psk-file key --link udp --listen 198.51.100.1:18515
  sudo xdproce serve --dev eth1 --insecure --capture server.pcapng   # a lab only
  sudo xdproce serve --dev eth1 --psk-file key --tls    # prints the fingerprint clients pin
  sudo xdproce serve --dev eth1 --tls-client-ca ca.pem --overwrite
  sudo xdproce serve --dev eth1 --psk-file key --tls-proxy /run/xdproce/tls.sock`,
	Setup: setupServe,
}

func setupServe(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	dir := fs.String("dir", ".", "`directory` received files land in and files are served from")
	listen := fs.String("listen", fmt.Sprintf(":%d", xfer.DefaultPort), "TCP `address` of the control port")
	jsonOut := fs.Bool("json", false, "print one JSON object per finished request")
	var cf ctrlFlags
	cf.register(fs, true)
	var mf metricsFlags
	mf.register(fs)
	var rf relFlag
	rf.register(fs)
	var ccf ccFlag
	ccf.register(fs)
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce serve"
		if len(args) != 0 {
			return usageErrorf(cmd, "unexpected argument %q", args[0])
		}
		if err := checkAddr(cmd, "--listen", *listen, true); err != nil {
			return err
		}
		ccfg, err := cf.config(cmd)
		if err != nil {
			return err
		}
		if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
			return fmt.Errorf("--dir %s: not a directory", *dir)
		}
		removeStale(env, *dir)
		dev, err := openDevice(env, cmd, &df)
		if err != nil {
			return err
		}
		defer func() {
			if err := dev.Close(); err != nil {
				env.Log.Warn("close", "err", err)
			}
			if df.capture != "" {
				fmt.Fprintf(env.Stderr, "capture written to %s\n", df.capture)
			}
		}()
		stopMetrics, err := mf.start(env, dev)
		if err != nil {
			return err
		}
		defer stopMetrics()
		ln, err := cm.Listen(*listen, ccfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stderr, "serving on %s over %s (%s), path MTU %d; control port %s; files in %s\n",
			dev.Name(), dev.LinkName(), dev.LinkReason(), dev.PathMTU().Bytes(), ln.Addr(), *dir)
		if fp := ln.Fingerprint(); fp != "" {
			kept := ""
			if t := ccfg.TLS; t.Dir != "" {
				kept = "; kept in " + t.Dir
				if ln.Generated() {
					kept = "; new, kept in " + t.Dir
				}
			}
			fmt.Fprintf(env.Stderr, "TLS certificate fingerprint %s (clients: --tls-fingerprint %s%s)\n", fp, fp, kept)
		}
		if p := ccfg.TLSProxy; p != "" {
			data := "in kernel TLS"
			if err := ktls.ProbeKernel(); err != nil {
				data = fmt.Sprintf("through the user-space record layer when the kernel refuses (%v)", err)
			}
			fmt.Fprintf(env.Stderr, "TLS with the handshake in the proxy at %s (clients pin the fingerprint it printed); data moves %s\n", p, data)
		}
		fmt.Fprintln(env.Stderr, cf.describe(ln, *dir))
		var mu sync.Mutex
		so := &xfer.Options{Log: env.Log}
		if err := ccf.apply(cmd, so); err != nil {
			return err
		}
		if err := rf.apply(cmd, so); err != nil {
			return err
		}
		s := &xfer.Server{Dev: dev.Device, Dir: *dir, Options: so, Overwrite: cf.overwrite,
			Done: func(op string, res xfer.Result, err error) {
				mu.Lock()
				defer mu.Unlock()
				// The capture is readable up to here while serve runs
				// on, by the time the request's line is out.
				if err := dev.FlushCapture(); err != nil {
					env.Log.Warn("capture", "err", err)
				}
				printServed(env, *jsonOut, op, res, err)
			}}
		return s.Serve(ctx, ln)
	}
}

func printServed(env *Env, asJSON bool, op string, res xfer.Result, err error) {
	if asJSON {
		rec := struct {
			Op string `json:"op"`
			xfer.Result
			Error string `json:"error,omitempty"`
		}{Op: op, Result: res}
		if err != nil {
			rec.Error = err.Error()
		}
		b, _ := json.Marshal(rec)
		fmt.Fprintf(env.Stdout, "%s\n", b)
		return
	}
	verb := map[string]string{"put": "received", "get": "sent"}[op]
	if verb == "" {
		verb = op
	}
	if err != nil {
		fmt.Fprintf(env.Stdout, "%s %s failed: %v\n", verb, res.Name, err)
		return
	}
	fmt.Fprintf(env.Stdout, "%s %s: %d bytes, sha256 %s, %.2f Gb/s by %s over %s\n",
		verb, res.Name, res.Size, res.SHA256, res.Gbps, res.Op, res.Link)
	if res.Enlarge != nil {
		printEnlarge(env, res.Enlarge)
	}
}
