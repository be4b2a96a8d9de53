package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// startTLSProxy runs 'xdproce tls-proxy' with a new certificate and returns its socket, the
// certificate file and the certificate's fingerprint.
func startTLSProxy(t *testing.T) (sock, certFile, fp string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	fp, err := cm.WriteSelfSigned("xdproce", certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	sock = filepath.Join(dir, "run", "tls.sock")
	cmd := exec.Command(binary, "tls-proxy", "--socket", sock, "--cert", certFile, "--key", keyFile)
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("tls-proxy: %v: %s", err, errb.String())
			}
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("tls-proxy did not exit on SIGINT")
		}
		if _, err := os.Stat(sock); err == nil {
			t.Errorf("tls-proxy left its socket %s", sock)
		}
	})
	waitOutput(t, &errb, "--tls-fingerprint "+fp)
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, %v; want mode 0600", sock, st.Mode(), err)
	}
	return sock, certFile, fp
}

// TestPrivilegedServeTLSProxy: 'serve --tls-proxy' between two namespaces, with --insecure
// and with --psk-file: send and get through it with the proxy's fingerprint pinned, a plain
// client is told to use TLS, and openssl s_client -tls1_3 completes the handshake.
func TestPrivilegedServeTLSProxy(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	sock, certFile, fp := startTLSProxy(t)
	work := t.TempDir()
	host := topo.A.IPv4.String()
	src := filepath.Join(work, "f")
	data := writeFile(t, src, 300<<10, 21)

	s := startServer(t, topo, "--tls-proxy", sock)
	waitOutput(t, &s.errb, "TLS with the handshake in the proxy at "+sock)
	waitOutput(t, &s.errb, "no client authentication (--insecure)")
	if r := runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", fp, host, src)); r.code != 0 {
		t.Fatalf("send through the proxy: exit %d: %s", r.code, r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(s.dir, "f")); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes", len(got))
	}
	back := t.TempDir()
	if r := runCmd(t, clientCmd(topo, "get", "--tls-fingerprint", fp, host, "f", back)); r.code != 0 {
		t.Fatalf("get through the proxy: exit %d: %s", r.code, r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(back, "f")); !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes back", len(got))
	}
	// Both ends' handshakes in proxies (here the same one): the client's endpoint too.
	if r := runCmd(t, clientCmd(topo, "send", "--tls-proxy", sock, "--tls-fingerprint", fp, "--name", "both", host, src)); r.code != 0 {
		t.Fatalf("send with the client's handshake in the proxy too: exit %d: %s", r.code, r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(s.dir, "both")); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes from the proxied client", len(got))
	}
	r := runCmd(t, clientCmd(topo, "send", host, src, "--name", "plain"))
	oneErrorLine(t, "plain client of serve --tls-proxy", r, 1, "server requires TLS")
	noPartial(t, s.dir, "plain")

	// A stock TLS 1.3 client completes the handshake with serve's endpoint.
	if openssl, err := exec.LookPath("openssl"); err != nil {
		testenv.Skipf(t, "openssl s_client part: openssl not installed (apt-get install openssl)")
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := topo.B.NS.Command(ctx, openssl, "s_client", "-connect", host+":18515", "-tls1_3",
			"-CAfile", certFile, "-servername", "xdproce", "-verify_return_error", "-brief")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Protocol version: TLSv1.3") || !strings.Contains(string(out), "Verification: OK") {
			t.Fatalf("openssl s_client -tls1_3 against serve --tls-proxy: %v:\n%s", err, out)
		}
	}
	s.stop(t)

	// --psk-file: issue 10's authentication inside the proxied session.
	key := filepath.Join(work, "key")
	os.WriteFile(key, []byte("the right key, 32 bytes of it...\n"), 0o600)
	s = startServer(t, topo, "--tls-proxy", sock, "--psk-file", key)
	waitOutput(t, &s.errb, "clients authenticate with the pre-shared key in "+key)
	r = runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", fp, host, src))
	oneErrorLine(t, "send without the key through the proxy", r, 1, "the server requires a pre-shared key (--psk-file FILE)")
	if r := runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", fp, "--psk-file", key, host, src)); r.code != 0 {
		t.Fatalf("send with the key through the proxy: exit %d: %s", r.code, r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(s.dir, "f")); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes with the key", len(got))
	}
}

func TestTLSProxyUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tls-proxy", "--cert", "x", "--key", "y"}, "--socket PATH is needed"},
		{[]string{"tls-proxy", "--socket", "x", "--cert", "c"}, "--cert and --key go together"},
		{[]string{"serve", "--dev", "lo", "--insecure", "--tls-proxy", "x", "--tls"}, "does not go with --tls"},
		{[]string{"serve", "--dev", "lo", "--tls-proxy", "x", "--tls-client-ca", "ca.pem"}, "does not check client certificates"},
		{[]string{"send", "--dev", "lo", "--tls-proxy", "x", "--tls-cert", "c", "--tls-key", "k", "h", "f"}, "the client certificate is the proxy's own"},
	} {
		r := runBinary(t, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
