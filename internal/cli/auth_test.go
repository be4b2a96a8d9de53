package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// TestPrivilegedServeSafety: between two namespaces over AF_XDP, against
// 'serve --psk-file':
//   - a client without the key, or with another one, is refused with one
//     line and creates no file; with the key it transfers;
//   - a link in --dir to a file outside is refused with one line, and none of
//     that file's bytes are in the client's capture;
//   - an existing file is replaced only with serve --overwrite and send
//     --force;
//   - get removes the temporary files killed gets left in its directory
//     (only xdproce's, only of dead processes) and names them.
func TestPrivilegedServeSafety(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	work := t.TempDir()
	key, other := filepath.Join(work, "key"), filepath.Join(work, "other")
	os.WriteFile(key, []byte("the right key, 32 bytes of it...\n"), 0o600)
	os.WriteFile(other, []byte("another key, also long enough...\n"), 0o600)
	s := startServer(t, topo, "--psk-file", key)
	waitOutput(t, &s.errb, "clients authenticate with the pre-shared key in "+key)
	host := topo.A.IPv4.String()
	src := filepath.Join(work, "f")
	data := writeFile(t, src, 200<<10, 11)

	r := runCmd(t, clientCmd(topo, "send", host, src))
	oneErrorLine(t, "send without the key", r, 1, "the server requires a pre-shared key (--psk-file FILE)")
	r = runCmd(t, clientCmd(topo, "send", "--psk-file", other, host, src))
	oneErrorLine(t, "send with another key", r, 1, "the keys differ")
	r = runCmd(t, clientCmd(topo, "get", host, "anything", work))
	oneErrorLine(t, "get without the key", r, 1, "requires a pre-shared key")
	noPartial(t, s.dir, "f")
	if ents, _ := os.ReadDir(s.dir); len(ents) != 0 {
		t.Fatalf("unauthenticated clients left %v", ents)
	}
	if r := runCmd(t, clientCmd(topo, "send", "--psk-file", key, host, src)); r.code != 0 {
		t.Fatalf("send with the key: exit %d: %s", r.code, r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(s.dir, "f")); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes", len(got))
	}

	// No overwrite unless both sides say so.
	writeFile(t, filepath.Join(work, "v2"), 1000, 12)
	r = runCmd(t, clientCmd(topo, "send", "--psk-file", key, "--name", "f", host, filepath.Join(work, "v2")))
	oneErrorLine(t, "send of an existing name", r, 1, `"f": file exists on the server (send --force replaces it on a server run with --overwrite)`)
	r = runCmd(t, clientCmd(topo, "send", "--psk-file", key, "--force", "--name", "f", host, filepath.Join(work, "v2")))
	oneErrorLine(t, "send --force to a server without --overwrite", r, 1, "this server does not replace files (serve --overwrite)")
	if got, _ := os.ReadFile(filepath.Join(s.dir, "f")); !bytes.Equal(got, data) {
		t.Fatal("the file was replaced")
	}

	// A link out of --dir.
	outside := filepath.Join(work, "outside.txt")
	os.WriteFile(outside, bytes.Repeat([]byte("NOT-FOR-CLIENTS "), 500), 0o644)
	os.Symlink(outside, filepath.Join(s.dir, "link.txt"))
	getDir := t.TempDir()
	capFile := filepath.Join(work, "get.pcapng")
	r = runCmd(t, clientCmd(topo, "get", "--psk-file", key, "--capture", capFile, host, "link.txt", getDir))
	r.stderr = strings.Replace(r.stderr, "capture written to "+capFile+"\n", "", 1)
	oneErrorLine(t, "get of a link out of --dir", r, 1, `"link.txt" leads outside the served directory`)
	if b, err := os.ReadFile(capFile); err != nil || bytes.Contains(b, []byte("NOT-FOR-CLIENTS")) {
		t.Errorf("capture of the refused get: %v, holds the outside file: %v", err, bytes.Contains(b, []byte("NOT-FOR-CLIENTS")))
	}
	noPartial(t, getDir, "link.txt")

	// get cleans up after killed gets: its own names of dead processes only.
	stale := ".f.xdproce-" + strconv.Itoa(os.Getpid()) + "-1-42.part" // this PID, another start time: gone
	keep := []string{".f.xdproce-nonsense.part", "f.xdproce-" + strconv.Itoa(os.Getpid()) + "-1-43.part", "notes.txt"}
	for _, n := range append([]string{stale}, keep...) {
		os.WriteFile(filepath.Join(getDir, n), []byte("partial"), 0o644)
	}
	r = runCmd(t, clientCmd(topo, "get", "--psk-file", key, host, "f", getDir))
	if r.code != 0 {
		t.Fatalf("get: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "removed "+filepath.Join(getDir, stale)) {
		t.Errorf("get did not say it removed %s: %q", stale, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(getDir, stale)); !os.IsNotExist(err) {
		t.Errorf("%s kept", stale)
	}
	for _, n := range keep {
		if _, err := os.Stat(filepath.Join(getDir, n)); err != nil {
			t.Errorf("%s removed: %v", n, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(getDir, "f")); !bytes.Equal(got, data) {
		t.Errorf("fetched %d bytes", len(got))
	}

	// Both flags: replaced.
	s.stop(t)
	s = startServerIn(t, topo, s.dir, "--psk-file", key, "--overwrite")
	if r := runCmd(t, clientCmd(topo, "send", "--psk-file", key, "--force", "--name", "f", host, filepath.Join(work, "v2"))); r.code != 0 {
		t.Fatalf("send --force to serve --overwrite: exit %d: %s", r.code, r.stderr)
	}
	if got, want := mustRead(t, filepath.Join(s.dir, "f")), mustRead(t, filepath.Join(work, "v2")); !bytes.Equal(got, want) {
		t.Error("send --force to serve --overwrite did not replace the file")
	}
}

// TestPrivilegedServeMutualTLS: 'serve --tls-client-ca' takes a client with a
// certificate its CA signed and refuses one without, with one line and no
// file.
func TestPrivilegedServeMutualTLS(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	work := t.TempDir()
	ca, cert, key := testenv.ClientCA(t, work)
	s := startServer(t, topo, "--tls-client-ca", ca, "--tls-dir", filepath.Join(work, "conf"))
	fp := fingerprintOf(t, s)
	waitOutput(t, &s.errb, "clients authenticate with a TLS certificate signed by "+ca)
	host := topo.A.IPv4.String()
	src := filepath.Join(work, "f")
	data := writeFile(t, src, 50<<10, 13)
	r := runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", fp, host, src))
	oneErrorLine(t, "send without a client certificate", r, 1, "the server requires a client certificate (--tls-cert FILE --tls-key FILE)")
	if ents, _ := os.ReadDir(s.dir); len(ents) != 0 {
		t.Fatalf("a client without a certificate left %v", ents)
	}
	if r := runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", fp, "--tls-cert", cert, "--tls-key", key, host, src)); r.code != 0 {
		t.Fatalf("send with a client certificate: exit %d: %s", r.code, r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(s.dir, "f")); !bytes.Equal(got, data) {
		t.Errorf("stored %d bytes", len(got))
	}
}
