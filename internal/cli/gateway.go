package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/xdproce/xdproce/internal/gateway"
	"github.com/xdproce/xdproce/internal/xfer"
)

var gatewayCommand = &Command{
	Name:       "gateway",
	ShortUsage: "xdproce gateway [--dev IF] [--listen ADDR] --node HOST[:PORT] [--psk-file FILE] [--tls-fingerprint HEX [--tls-cert FILE --tls-key FILE]] [--tls-proxy PATH] [--max-conns N]",
	ShortHelp:  "serve an 'xdproce serve' node's files over HTTP, moving them to and from the node by RDMA",
	LongHelp: `Gateway answers plain HTTP on --listen (default 127.0.0.1:8080) for the
files of the 'xdproce serve' node at --node: PUT /NAME stores the request's
body as NAME in the node's --dir, GET /NAME reads NAME. Between the gateway
and the node the content moves by RDMA (RDMA WRITE into the node's staging
buffer for PUT, RDMA READ from it for GET, as 'xdproce send' and 'get' do,
on --dev: by default the interface of the route to the node), and only the
control messages (the request, a few dozen bytes per 4 MiB slot, the
SHA-256) travel on the node's TCP control connection, one per HTTP request,
authenticated as send and get authenticate (--psk-file, TLS flags).

The gateway streams: a PUT's body goes to the node as it arrives and a
GET's content to the client as it comes, the gateway holding at most the
staging buffer (4 × 4 MiB) and for a GET one slot more per request, whatever
the file's size; a slow client slows the transfer. The node verifies a PUT's
SHA-256 before the file appears under NAME; a GET's last slot is held back
until the SHA-256 is verified, so a failed GET ends with the connection cut
short, never with a complete but wrong body.

HTTP: a PUT needs a Content-Length (411 otherwise: a chunked body is not
taken) and answers 201 with the size and SHA-256; an existing NAME is
replaced only with PUT /NAME?overwrite=1 on a node run with --overwrite
(409 otherwise). GET answers 200 with Content-Length, or for a Range header
of one byte range (bytes=A-B, A-, -N) 206 with Content-Range, the node
reading only that part (a node must offer it: older ones are refused with
501); a range past the end gets 416 with Content-Range: bytes */SIZE. A Range
header of several ranges, or a malformed one, is ignored as RFC 9110 allows:
the whole file comes with 200. Other errors: 400 for a name the node would
refuse (directories, a leading dot, control characters), 404 for a missing
file, 405 for methods other than GET and PUT, 502 when the node is
unreachable or the transfer with it fails, 503 beyond --max-conns requests
at once; each with one line of text.

HTTP clients are not authenticated: anyone who reaches --listen can read and
write the node's directory with the gateway's credentials. Keep the default
loopback address, or put the gateway behind something that authenticates;
a non-loopback --listen is warned about at start-up.

Between the gateway and the node, --reliability, --cc (--ecn, --dscp) and
--bdp work as for send and get: selective repeat and DCQCN when the node
agrees, go-back-N and none otherwise.

Gateway prints one line per request on stdout (method, name, status, bytes,
time) and runs until interrupted.

EXAMPLES
  sudo xdproce gateway --node 198.51.100.1 --psk-file key
  curl -T disk.img http://127.0.0.1:8080/disk.img
  curl -o copy.img http://127.0.0.1:8080/disk.img
  curl -r 0-1023 http://127.0.0.1:8080/disk.img | xxd | head`,
	Setup: setupGateway,
}

func setupGateway(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, false)
	fs.StringVar(&df.dev, "dev", "", "network `interface` to run RoCEv2 on (default: the interface of the route to --node)")
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP `address` to listen on (clients are not authenticated: see the help)")
	node := fs.String("node", "", "the 'xdproce serve' node, `HOST[:PORT]` (required)")
	retry := fs.Duration("connect-timeout", 2*time.Second, "how long to retry the node's control connection per request")
	maxConns := fs.Int("max-conns", gateway.DefaultMaxConns, "requests served at once (each holds a 16 MiB staging buffer); more get 503")
	var cf ctrlFlags
	cf.register(fs, false)
	var rf relFlag
	rf.register(fs)
	var ccf ccFlag
	ccf.register(fs)
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce gateway"
		if len(args) != 0 {
			return usageErrorf(cmd, "unexpected argument %q", args[0])
		}
		if *node == "" {
			return usageErrorf(cmd, "--node HOST[:PORT] is required")
		}
		if err := checkAddr(cmd, "--node", *node, false); err != nil {
			return err
		}
		if _, _, err := net.SplitHostPort(*listen); err != nil {
			return usageErrorf(cmd, "--listen %q: want HOST:PORT", *listen)
		}
		if err := checkAddr(cmd, "--listen", *listen, true); err != nil {
			return err
		}
		if *maxConns < 1 {
			return usageErrorf(cmd, "--max-conns %d: want at least 1", *maxConns)
		}
		// The node's queue pairs: selective repeat and DCQCN when the node
		// agrees (the defaults), as for send and get.
		o := &xfer.Options{Log: env.Log}
		if err := rf.apply(cmd, o); err != nil {
			return err
		}
		if err := ccf.apply(cmd, o); err != nil {
			return err
		}
		ccfg, err := cf.config(cmd)
		if err != nil {
			return err
		}
		ccfg.Retry = *retry
		if df.dev == "" {
			if df.dev, err = routeDev(*node); err != nil {
				return fmt.Errorf("gateway: --dev not given, and %w", err)
			}
		}
		dev, err := openDevice(env, cmd, &df)
		if err != nil {
			return err
		}
		defer closeDevice(env, dev)
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		fmt.Fprintf(env.Stderr, "gateway on http://%s for node %s, over %s (%s), path MTU %d\n",
			ln.Addr(), *node, dev.Name(), dev.LinkName(), dev.PathMTU().Bytes())
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().IsLoopback() {
			fmt.Fprintf(env.Stderr, "warning: HTTP clients are not authenticated: anyone who reaches %s can read and write the node's files\n", ln.Addr())
		}
		var mu sync.Mutex
		g := &gateway.Gateway{Dev: dev.Device, Node: *node, Ctrl: ccfg, MaxConns: *maxConns,
			Options: o,
			Report: func(line string) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintln(env.Stdout, line)
			}}
		srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		select {
		case err := <-done:
			return fmt.Errorf("gateway: %w", err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("gateway: %w", err)
		}
		return nil
	}
}

// routeDev names the interface of the route to the node: the one holding
// the local address the kernel picks for it.
func routeDev(node string) (string, error) {
	host := node
	if h, _, err := net.SplitHostPort(node); err == nil {
		host = h
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "", fmt.Errorf("no route to %s: %w", host, err)
	}
	local := c.LocalAddr().(*net.UDPAddr).IP
	c.Close()
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(local) {
				return ifc.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no interface holds %s, the local address toward %s: give --dev", local, host)
}
