package cli

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cm/tlsproxy"
)

var tlsProxyCommand = &Command{
	Name:       "tls-proxy",
	ShortUsage: "xdproce tls-proxy --socket PATH [--cert FILE --key FILE] [--timeout D]",
	ShortHelp:  "run the TLS handshakes of 'serve --tls-proxy' (and of clients) in a separate process",
	LongHelp: `Tls-proxy holds the TLS certificate and key and runs the TLS 1.3
handshakes of the control connections of 'xdproce serve --tls-proxy PATH'
(and of 'send'/'get --tls-proxy PATH'). Serve relays each client's
handshake records to it over the unix socket PATH; the proxy answers with
the session's cipher suite, keys, IVs and sequence numbers, and serve then
moves the connection's data itself, in the kernel's TLS (TCP_ULP "tls")
where the kernel has it, else with its own AES-GCM record layer. The
process that reads and writes the data never holds the private key.

For a client, the proxy verifies the server as the client's
--tls-fingerprint or --tls-ca say (else by the system roots) and presents
its own certificate, if it has one, to a server that asks for a client
certificate. Without --cert and --key the proxy runs client handshakes
only.

The socket is made with mode 0600, and the proxy serves only processes of
its own user or root (checked with SO_PEERCRED on each connection); serve
checks the proxy the same way. A stale socket at PATH is replaced.

TLS 1.3 only, without session tickets. The endpoint's record layer has
TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384: a client that offers
neither, or that puts TLS_CHACHA20_POLY1305_SHA256 first, is refused
with a handshake failure that says so. A client's KeyUpdate ends the
connection with an unexpected_message alert (the endpoint does not rekey).

The proxy prints its certificate's SHA-256 fingerprint: clients of serve
pin it with --tls-fingerprint (or verify the certificate with --tls-ca).
Client certificates are not checked: clients of serve authenticate with
--psk-file, or serve runs with --insecure.

Examples:
  xdproce tls-proxy --socket /run/xdproce/tls.sock --cert cert.pem --key key.pem &
  sudo xdproce serve --dev eth1 --psk-file key --tls-proxy /run/xdproce/tls.sock`,
	Setup: func(fs *flag.FlagSet, env *Env) func(ctx context.Context, args []string) error {
		sock := fs.String("socket", "", "`path` of the unix socket serve connects to (its directory is made, mode 0700, if missing)")
		certFile := fs.String("cert", "", "TLS certificate `FILE` (PEM): serve's certificate, a client's client certificate; without it, client handshakes only")
		keyFile := fs.String("key", "", "TLS private key `FILE` (PEM)")
		timeout := fs.Duration("timeout", 10*time.Second, "bound on each handshake")
		return func(ctx context.Context, args []string) error {
			const cmd = "xdproce tls-proxy"
			if len(args) != 0 {
				return usageErrorf(cmd, "unexpected argument %q", args[0])
			}
			if *sock == "" {
				return usageErrorf(cmd, "--socket PATH is needed")
			}
			if (*certFile == "") != (*keyFile == "") {
				return usageErrorf(cmd, "--cert and --key go together")
			}
			if *timeout <= 0 {
				return usageErrorf(cmd, "--timeout %v: want a positive duration", *timeout)
			}
			var cert *tls.Certificate
			if *certFile != "" {
				c, err := tls.LoadX509KeyPair(*certFile, *keyFile)
				if err != nil {
					return fmt.Errorf("tls-proxy: %w", err)
				}
				cert = &c
			}
			if dir := filepath.Dir(*sock); dir != "" {
				if _, err := os.Stat(dir); os.IsNotExist(err) {
					if err := os.MkdirAll(dir, 0o700); err != nil {
						return fmt.Errorf("tls-proxy: %w", err)
					}
				}
			}
			ln, err := tlsproxy.Listen(*sock)
			if err != nil {
				return err
			}
			defer os.Remove(*sock)
			if cert != nil {
				fp := cm.Fingerprint(cert.Certificate[0])
				fmt.Fprintf(env.Stderr, "tls-proxy on %s (mode 0600; uid %d and root only); certificate fingerprint %s (clients: --tls-fingerprint %s)\n",
					*sock, os.Geteuid(), fp, fp)
			} else {
				fmt.Fprintf(env.Stderr, "tls-proxy on %s (mode 0600; uid %d and root only); no certificate: client handshakes only\n", *sock, os.Geteuid())
			}
			return tlsproxy.New(cert, *timeout, env.Log).Serve(ctx, ln)
		}
	},
}
