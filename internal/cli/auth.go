package cli

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/xdproce/xdproce/cm"
)

// ctrlFlags are the flags of xdproce's control connection: TLS, and how
// serve authenticates its clients (a pre-shared key or TLS client
// certificates) or, with --insecure, does not.
type ctrlFlags struct {
	server                      bool
	tls                         bool
	cert, key                   string // server: its certificate; client: its client certificate
	fingerprint, ca, serverName string // client
	clientCA, tlsDir            string // server
	tlsProxy                    string // server: the tls-proxy socket
	pskFile                     string
	insecure, overwrite         bool // server
}

func (t *ctrlFlags) register(fs *flag.FlagSet, server bool) {
	t.server = server
	fs.BoolVar(&t.tls, "tls", false, "run the control connection over TLS")
	fs.StringVar(&t.pskFile, "psk-file", "", "authenticate with the pre-shared key in `FILE` (HMAC challenge both ways; the key never goes on the wire; make one with: head -c 32 /dev/urandom | base64 > FILE)")
	if server {
		fs.StringVar(&t.cert, "tls-cert", "", "TLS certificate `FILE` (PEM); with --tls and none, a self-signed one kept in --tls-dir")
		fs.StringVar(&t.key, "tls-key", "", "TLS private key `FILE` (PEM)")
		fs.StringVar(&t.tlsDir, "tls-dir", "", "`directory` the self-signed certificate is kept in, so its fingerprint survives restarts (default $XDG_CONFIG_HOME/xdproce, else ~/.config/xdproce)")
		fs.StringVar(&t.tlsProxy, "tls-proxy", "", "run TLS with the handshake in 'xdproce tls-proxy' at the unix socket `PATH` (it holds the certificate; clients pin its fingerprint)")
		fs.StringVar(&t.clientCA, "tls-client-ca", "", "require clients to present a TLS certificate signed by a CA in `FILE` (PEM); implies --tls")
		fs.BoolVar(&t.insecure, "insecure", false, "accept clients without authenticating them: anyone who reaches the control port can read and write --dir")
		fs.BoolVar(&t.overwrite, "overwrite", false, "let clients that ask (send --force) replace existing files")
		return
	}
	fs.StringVar(&t.tlsProxy, "tls-proxy", "", "run TLS with the handshake in 'xdproce tls-proxy' at the unix socket `PATH` (it verifies the server as --tls-fingerprint or --tls-ca say, else by the system roots; its own certificate, if any, is the client certificate)")
	fs.StringVar(&t.fingerprint, "tls-fingerprint", "", "pin the server's certificate by its SHA-256 `HEX` (as 'xdproce serve --tls' prints it); implies --tls")
	fs.StringVar(&t.ca, "tls-ca", "", "verify the server's certificate with the CA certificates in `FILE` (PEM); implies --tls")
	fs.StringVar(&t.serverName, "tls-server-name", "", "`name` the server's certificate must carry (default: the host)")
	fs.StringVar(&t.cert, "tls-cert", "", "client certificate `FILE` (PEM) for a server run with --tls-client-ca; implies --tls")
	fs.StringVar(&t.key, "tls-key", "", "the client certificate's private key `FILE` (PEM)")
}

// config returns the cm configuration of the flags. Malformed or missing
// combinations are usage errors.
func (t *ctrlFlags) config(cmd string) (*cm.Config, error) {
	if (t.cert == "") != (t.key == "") {
		return nil, usageErrorf(cmd, "--tls-cert and --tls-key go together")
	}
	if t.fingerprint != "" {
		fp, err := cm.ParseFingerprint(t.fingerprint)
		if err != nil {
			return nil, usageErrorf(cmd, "--tls-fingerprint %q: want the 64 hex digits of a SHA-256", t.fingerprint)
		}
		t.fingerprint = fp
	}
	if t.fingerprint != "" || t.ca != "" || t.cert != "" || t.clientCA != "" {
		t.tls = true
	}
	cfg := &cm.Config{Insecure: t.insecure, TLSProxy: t.tlsProxy}
	if t.tlsProxy != "" && !t.server && t.cert != "" {
		return nil, usageErrorf(cmd, "with --tls-proxy the client certificate is the proxy's own (tls-proxy --cert, --key), not --tls-cert")
	}
	if t.tlsProxy != "" && t.clientCA != "" {
		return nil, usageErrorf(cmd, "--tls-proxy does not check client certificates (--tls-client-ca): authenticate clients with --psk-file")
	}
	if t.tlsProxy != "" && t.server && (t.tls || t.cert != "" || t.tlsDir != "") {
		return nil, usageErrorf(cmd, "--tls-proxy runs TLS with the proxy's certificate: it does not go with --tls, --tls-cert or --tls-dir")
	}
	if t.pskFile != "" {
		key, err := cm.LoadPSK(t.pskFile)
		if err != nil {
			return nil, err
		}
		cfg.PSK = key
	}
	if t.server && !t.insecure && t.pskFile == "" && t.clientCA == "" {
		return nil, usageErrorf(cmd, "no client authentication: give --psk-file FILE or --tls-client-ca FILE, or --insecure to let anyone who reaches the control port read and write --dir")
	}
	if !t.tls {
		return cfg, nil
	}
	cfg.TLS = &cm.TLSConfig{CertFile: t.cert, KeyFile: t.key, Fingerprint: t.fingerprint, CAFile: t.ca,
		ServerName: t.serverName, ClientCAFile: t.clientCA}
	if t.server && t.cert == "" {
		cfg.TLS.Dir = t.tlsDir
		if cfg.TLS.Dir == "" {
			d, err := os.UserConfigDir()
			if err != nil {
				return nil, usageErrorf(cmd, "--tls without --tls-cert keeps its certificate in --tls-dir, and there is no default (%v)", err)
			}
			cfg.TLS.Dir = filepath.Join(d, "xdproce")
		}
	}
	return cfg, nil
}

// describe says on one line how the server authenticates its clients.
func (t *ctrlFlags) describe(ln *cm.Listener, dir string) string {
	switch {
	case t.pskFile != "" && t.clientCA != "":
		return fmt.Sprintf("clients authenticate with the pre-shared key in %s and a TLS certificate signed by %s", t.pskFile, t.clientCA)
	case t.pskFile != "":
		return "clients authenticate with the pre-shared key in " + t.pskFile
	case t.clientCA != "":
		return "clients authenticate with a TLS certificate signed by " + t.clientCA
	}
	return fmt.Sprintf("no client authentication (--insecure): anyone who reaches %v can read and write %s", ln.Addr(), dir)
}

// checkAddr checks the port of a host[:port] or [host]:port argument:
// a number in 1..65535 (0 too when zeroOK, for a listener).
func checkAddr(cmd, what, addr string, zeroOK bool) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil // a bare host: the default port
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || n == 0 && !zeroOK {
		return usageErrorf(cmd, "%s %q: port %q is not a number from 1 to 65535", what, addr, port)
	}
	return nil
}
