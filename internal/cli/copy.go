package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
)

var copyCommand = &Command{
	Name:       "copy",
	ShortUsage: "xdproce copy [--dev IF] [--psk-file FILE] [--tls-fingerprint HEX [--tls-cert FILE --tls-key FILE]] [--force] [--json] HOST_S:NAME HOST_T[:NEWNAME]",
	ShortHelp:  "move a file between two 'xdproce serve' nodes by third-party RDMA; its bytes do not pass through here",
	LongHelp: `Copy moves NAME from the --dir of the server at HOST_S (the source) to the
--dir of the server at HOST_T (the sink), stored there as NEWNAME (default:
NAME), by third-party OOO READs (docs/ooo.md, Third party): this side sends
the requests, the source streams the bytes straight to the sink, and the
sink's completions come back here. Only requests and completions cross this
side's interface (about 0.05 % of the file's bytes).

Both servers must offer third-party copy (any xdproce serve that knows it
does, capability "ooo-3p"); one that does not is refused in the hello with
one line. Each server registers the whole file (at most 1 GiB) and acts only
for this side's queue pair, which it learns on its control connection: the
authentication flags are as for send and get, and the keys of each server go
to this side only. The sink checks the SHA-256 the source computed before it
renames the file into place; an existing NEWNAME is replaced only with
--force on a sink run with --overwrite.

HOST_S and HOST_T are an address or name, ADDR:PORT when the server's
control port is not 18515, [IPv6] or [IPv6]:PORT. A number right after the
host is its port (give HOST:PORT:NAME for a numeric NAME).
--dev defaults to the interface of the route to HOST_S.

The result goes to stdout: the size, the SHA-256 the sink verified, the
throughput, the operations and their retries (with --json as one object,
as for send, with op "OOO third-party READ").

EXAMPLES
  sudo xdproce copy --psk-file key 198.51.100.2:disk.img 198.51.100.3
  sudo xdproce copy --dev eth1 198.51.100.2:9000:data.bin [2001:db8::3]:9000:data-copy.bin`,
	Setup: setupCopy,
}

// A fileAddr is HOST[:PORT]:NAME split: the control address and the name.
type fileAddr struct {
	host string // for cm.Dial: HOST or HOST:PORT ([IPv6] bracketed)
	ip   string // HOST alone, for the route
	name string
}

// parseFileAddr splits ADDR[:PORT][:NAME], [IPv6][:PORT][:NAME]; a bare
// number after the host is a port.
func parseFileAddr(s string) (fileAddr, error) {
	var f fileAddr
	var rest string
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return f, fmt.Errorf("%q: no closing ']'", s)
		}
		f.ip, rest = s[1:end], s[end+1:]
		if rest != "" && rest[0] != ':' {
			return f, fmt.Errorf("%q: want ':' after ']'", s)
		}
		rest = strings.TrimPrefix(rest, ":")
	} else {
		f.ip, rest, _ = strings.Cut(s, ":")
		// An unbracketed IPv6 address: the whole is one, or its first group
		// is no host name (no dot) while more colons follow.
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() || strings.Count(s, ":") > 1 && !strings.Contains(f.ip, ".") {
			return f, fmt.Errorf("%q: put an IPv6 address in brackets, [ADDR]:NAME", s)
		}
	}
	if f.ip == "" {
		return f, fmt.Errorf("%q: no host", s)
	}
	port := ""
	if p, name, ok := strings.Cut(rest, ":"); ok && digits(p) {
		port, f.name = p, name
	} else if digits(rest) {
		port = rest
	} else {
		f.name = rest
	}
	f.host = f.ip
	if strings.Contains(f.ip, ":") {
		f.host = "[" + f.ip + "]"
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return f, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
		}
		f.host = net.JoinHostPort(f.ip, port)
	}
	return f, nil
}

// digits reports whether s is a non-empty run of decimal digits.
func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func setupCopy(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, false)
	fs.StringVar(&df.dev, "dev", "", "network `interface` to run RoCEv2 on (default: the interface of the route to HOST_S)")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	retry := fs.Duration("connect-timeout", xfer.DefaultDialRetry, "how long to retry the control connections")
	force := fs.Bool("force", false, "replace a file of the same name on the sink (which must run with --overwrite)")
	var cf ctrlFlags
	cf.register(fs, false)
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce copy"
		if len(args) != 2 {
			return usageErrorf(cmd, "want HOST_S:NAME HOST_T[:NEWNAME], got %d arguments", len(args))
		}
		src, err := parseFileAddr(args[0])
		if err != nil {
			return usageErrorf(cmd, "HOST_S:NAME: %v", err)
		}
		dst, err := parseFileAddr(args[1])
		if err != nil {
			return usageErrorf(cmd, "HOST_T[:NEWNAME]: %v", err)
		}
		if src.name == "" {
			return usageErrorf(cmd, "HOST_S:NAME: %q names no file", args[0])
		}
		if dst.name == "" {
			dst.name = src.name
		}
		for _, n := range []string{src.name, dst.name} {
			if err := xfer.ValidName(n); err != nil {
				return usageErrorf(cmd, "%v", err)
			}
		}
		ccfg, err := cf.config(cmd)
		if err != nil {
			return err
		}
		if df.dev == "" {
			if df.dev, err = routeDev(src.ip); err != nil {
				return fmt.Errorf("copy: --dev not given and %w", err)
			}
			env.Log.Info("interface chosen", "dev", df.dev, "why", "the route to "+src.ip)
		}
		dev, err := openDevice(env, cmd, &df)
		if err != nil {
			return err
		}
		defer closeDevice(env, dev)
		ccfg.Retry = *retry
		// A server without third-party copy refuses in the hello, with one line.
		ccfg.Require = append(ccfg.Require, cm.CapOOO3P)
		if *force {
			ccfg.Require = append(ccfg.Require, cm.CapOverwrite)
		}
		sc, err := cm.Dial(ctx, src.host, ccfg)
		if err != nil {
			return fmt.Errorf("copy: source: %w", err)
		}
		tc, err := cm.Dial(ctx, dst.host, ccfg)
		if err != nil {
			sc.Close()
			return fmt.Errorf("copy: sink: %w", err)
		}
		res, err := xfer.Copy(ctx, dev.Device, sc, tc, src.name, dst.name, &xfer.Options{Log: env.Log, Force: *force})
		if err != nil {
			return fmt.Errorf("copy %s: %w", args[0], interrupted(ctx, err))
		}
		return printResult(env, *jsonOut, "copied", args[0]+" → "+dst.host, res)
	}
}

// printCopy is the second result line of a copy.
func printCopy(env *Env, res *xfer.Result) error {
	o := res.OOO
	_, err := fmt.Fprintf(env.Stdout, "third party: the bytes went from the source to the sink (links %s), not through this side; %d operations delivered, %d reissued, %d stale completions (operations of %d packets at the end)\n",
		res.Peer, o.Delivered, o.Retries, o.StaleCompletions, o.OpPackets)
	return err
}
