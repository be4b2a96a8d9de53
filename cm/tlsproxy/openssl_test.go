package tlsproxy

import (
	"bytes"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
	"github.com/xdproce/xdproce/internal/testenv"
)

// caFile writes the lab's certificate as a PEM CA file for openssl.
func (l *lab) caFile(t *testing.T) string {
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: l.cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// openssl s_client, a stock TLS 1.3 client, with each suite the endpoint has: 1 MiB each way.
func TestOpenSSLClientExchangesMiB(t *testing.T) {
	openssl := testenv.Tool(t, "openssl", "apt-get install openssl")
	l := newLab(t)
	ca := l.caFile(t)
	for _, suite := range []uint16{ktls.TLS_AES_128_GCM_SHA256, ktls.TLS_AES_256_GCM_SHA384} {
		t.Run(ktls.SuiteName(suite), func(t *testing.T) {
			res := l.serve(l.sock)
			up, down := pattern(mib, 3), pattern(mib, 4)
			cmd := exec.Command(openssl, "s_client", "-connect", l.tcp.Addr().String(), "-tls1_3",
				"-ciphersuites", ktls.SuiteName(suite), "-CAfile", ca, "-servername", "xdproce",
				"-verify_return_error", "-quiet", "-nocommands")
			cmd.Stdin = bytes.NewReader(up)
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
			defer timer.Stop()
			r := <-res
			if r.err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("endpoint: %v (openssl: %s)", r.err, stderr.String())
			}
			if r.c.Suite() != suite {
				t.Errorf("negotiated %s", ktls.SuiteName(r.c.Suite()))
			}
			r.c.SetDeadline(time.Now().Add(30 * time.Second))
			werr := make(chan error, 1)
			go func() {
				_, err := r.c.Write(down)
				werr <- err
			}()
			got := make([]byte, mib)
			if _, err := io.ReadFull(r.c, got); err != nil {
				t.Fatalf("endpoint read: %v", err)
			}
			if err := <-werr; err != nil {
				t.Fatalf("endpoint write: %v", err)
			}
			r.c.Close() // close_notify: s_client exits
			if err := cmd.Wait(); err != nil {
				t.Logf("openssl: %v: %s", err, stderr.String())
			}
			if !bytes.Equal(got, up) {
				t.Fatal("the endpoint got other bytes than openssl sent")
			}
			if !bytes.Equal(out.Bytes(), down) {
				t.Fatalf("openssl printed %d bytes, not the %d the endpoint sent (stderr: %s)", out.Len(), len(down), stderr.String())
			}
		})
	}
}

// openssl's "k" command sends a KeyUpdate: the endpoint closes with unexpected_message.
func TestOpenSSLKeyUpdateClosesWithAlert(t *testing.T) {
	openssl := testenv.Tool(t, "openssl", "apt-get install openssl")
	l := newLab(t)
	res := l.serve(l.sock)
	cmd := exec.Command(openssl, "s_client", "-connect", l.tcp.Addr().String(), "-tls1_3",
		"-CAfile", l.caFile(t), "-servername", "xdproce")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	r := <-res
	if r.err != nil {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("endpoint: %v", r.err)
	}
	r.c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(stdin, "hi\n")
	b := make([]byte, 3)
	if _, err := io.ReadFull(r.c, b); err != nil || string(b) != "hi\n" {
		t.Fatalf("endpoint read %q, %v", b, err)
	}
	io.WriteString(stdin, "k\n")
	_, err = r.c.Read(b)
	if err == nil || !strings.Contains(err.Error(), "KeyUpdate") {
		t.Fatalf("endpoint read after the peer's KeyUpdate: %v", err)
	}
	r.c.NetConn().Close()
	stdin.Close()
	cmd.Wait()
	if !strings.Contains(out.String(), "unexpected message") {
		t.Fatalf("openssl did not report the endpoint's unexpected_message alert:\n%s", out.String())
	}
}
