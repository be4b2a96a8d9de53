package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/roce"
)

// binary is the xdproce executable TestMain builds once.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "xdproce-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "xdproce")
	// Stat sockets of the processes the tests start (killed ones leave
	// theirs) go to the test's directory, not /run/xdproce.
	os.Setenv(stat.EnvDir, filepath.Join(dir, "run"))
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "building xdproce: no go on PATH:", err)
		os.Exit(1)
	}
	cmd := exec.Command(goTool, "build", "-o", binary, "github.com/xdproce/xdproce/cmd/xdproce")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building xdproce: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run calls Run with captured output.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = Run(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		out, errOut, err := run(t, args...)
		if err != nil || ExitCode(err) != 0 {
			t.Errorf("%v: %v", args, err)
		}
		for _, want := range []string{"USAGE", "SUBCOMMANDS", "  dump ", "FLAGS", "--log-level", "$XDPROCE_LOG_LEVEL", "--version", "EXIT STATUS"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: help lacks %q:\n%s", args, want, out)
			}
		}
		if errOut != "" {
			t.Errorf("%v: stderr %q", args, errOut)
		}
	}
	for _, args := range [][]string{{"dump", "-h"}, {"dump", "--help"}, {"help", "dump"}, {"dump", "file.pcap", "-h"}} {
		out, _, err := run(t, args...)
		if err != nil {
			t.Errorf("%v: %v", args, err)
		}
		for _, want := range []string{"USAGE\n  xdproce dump", "FILTER", "qpn=N", "JSON FORMAT", "schema", "EXAMPLES", "--verify", "--filter EXPR", "--json", "--format format", "--log-level"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "--version")
	if err != nil || !strings.HasPrefix(out, "xdproce ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: %q, %v", out, err)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		msg  string
	}{
		{nil, "no subcommand given"},
		{[]string{"bogus"}, `unknown subcommand "bogus" for xdproce`},
		{[]string{"help", "bogus"}, `unknown subcommand "bogus" for xdproce help`},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--log-level", "loud", "dump"}, `unknown log level "loud"`},
		{[]string{"dump"}, "no capture file given (run 'xdproce dump -h' for help)"},
		{[]string{"dump", "--bogus", "f"}, "flag provided but not defined: -bogus (run 'xdproce dump -h' for help)"},
		{[]string{"dump", "--format", "xml", "f"}, `unknown format "xml"`},
		{[]string{"dump", "f", "--filter", "qpn=zz"}, `parse filter "qpn=zz"`},
		{[]string{"dump", "f", "--filter"}, "flag needs an argument: -filter"},
		{[]string{"bench", "write", "--bdp", "lots"}, `--bdp "lots": want a size such as 256KiB, or 0`},
		{[]string{"gateway", "--node", "198.51.100.1", "--reliability", "fast"}, `--reliability "fast": want sr or gbn`},
		{[]string{"gateway", "--node", "198.51.100.1", "--cc", "bbr"}, `--cc "bbr"`},
		{[]string{"gateway", "--node", "198.51.100.1", "--bdp", "x"}, `--bdp "x"`},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.args...)
		var ue *UsageError
		if !errors.As(err, &ue) || ExitCode(err) != 2 {
			t.Errorf("%q: %v (exit %d), want a usage error", tt.args, err, ExitCode(err))
			continue
		}
		if !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%q: %q does not contain %q", tt.args, err, tt.msg)
		}
	}
	// No subcommand also prints the help to stderr.
	_, errOut, _ := run(t)
	if !strings.Contains(errOut, "SUBCOMMANDS") {
		t.Errorf("no subcommand: stderr %q", errOut)
	}
}

func TestExitCode(t *testing.T) {
	if ExitCode(nil) != 0 || ExitCode(errors.New("x")) != 1 || ExitCode(fmt.Errorf("wrapped: %w", &UsageError{Cmd: "xdproce", Msg: "m"})) != 2 {
		t.Error("ExitCode mapping wrong")
	}
}

func TestInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("verify", false, "")
	fs.String("filter", "", "")
	tests := []struct {
		in         []string
		flags, pos []string
	}{
		{[]string{"a", "--filter", "nak", "b"}, []string{"--filter", "nak"}, []string{"a", "b"}},
		{[]string{"a", "--verify", "b"}, []string{"--verify"}, []string{"a", "b"}},
		{[]string{"--filter=x", "a", "-verify=false"}, []string{"--filter=x", "-verify=false"}, []string{"a"}},
		{[]string{"a", "--", "--verify", "-"}, nil, []string{"a", "--verify", "-"}},
		{[]string{"-", "--unknown", "b"}, []string{"--unknown"}, []string{"-", "b"}},
		{[]string{"a", "--filter"}, []string{"--filter"}, []string{"a"}},
	}
	for _, tt := range tests {
		flags, pos := interspersed(fs, tt.in)
		if strings.Join(flags, " ") != strings.Join(tt.flags, " ") || strings.Join(pos, " ") != strings.Join(tt.pos, " ") {
			t.Errorf("interspersed(%q) = %q, %q; want %q, %q", tt.in, flags, pos, tt.flags, tt.pos)
		}
	}
}

const goldenDir = "../../testdata/pcaps"

// TestDumpText: dump of a golden capture prints exactly the dump stored
// beside it, whatever the order of flags and file.
func TestDumpText(t *testing.T) {
	for _, name := range []string{"rc_send", "rc_ack_nak", "rc_atomic", "ud_send", "ipv6", "vlan", "ooo-frames"} {
		want, err := os.ReadFile(filepath.Join(goldenDir, name+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(goldenDir, name+".pcapng")
		for _, args := range [][]string{{"dump", path}, {"dump", "--verify", path}, {"dump", path, "--verify", "--log-level", "error"}} {
			out, _, err := run(t, args...)
			if err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			if out != string(want) {
				t.Errorf("%q printed:\n%s\nwant:\n%s", args, out, want)
			}
		}
	}
}

func TestDumpFilter(t *testing.T) {
	path := filepath.Join(goldenDir, "rc_ack_nak.pcapng")
	out, _, err := run(t, "dump", path, "--filter", "nak and not rnr")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"PSN sequence error", "remote access error", "invalid request", "remote operational error"}
	if len(lines) != len(want) {
		t.Fatalf("filter printed %d lines:\n%s", len(lines), out)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], "aeth NAK "+w) {
			t.Errorf("line %d = %q, want NAK %s", i, lines[i], w)
		}
	}
	// The OOO opcodes by term, by name and by their headers' fields.
	oooPath := filepath.Join(goldenDir, "ooo-frames.pcapng")
	for _, c := range []struct {
		filter string
		want   []string
	}{
		{"ooo", []string{"OOO_WRITE", "OOO_COMPLETION", "OOO_READ_REQ", "OOO_3P_READ_REQ", "OOO_3P_WRITE"}},
		{"op=ooo_3p_*", []string{"OOO_3P_READ_REQ", "OOO_3P_WRITE"}},
		{"tid=7 and not op=OOO_WRITE", []string{"OOO_COMPLETION qpn 0x000011 ctx=0x000202/k5 tid=7 total=4096 status=ok"}},
		{"ctx=0x000101 and op=OOO_WRITE", []string{"OOO_WRITE qpn 0x000012 ctx=0x000101/k3 tid=7 idx=2 off=2048 len=1024 total=4096"}},
	} {
		out, _, err := run(t, "dump", "--verify", oooPath, "--filter", c.filter)
		if err != nil {
			t.Fatalf("--filter %q: %v", c.filter, err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(c.want) {
			t.Fatalf("--filter %q printed %d lines:\n%s", c.filter, len(lines), out)
		}
		for i, w := range c.want {
			if !strings.Contains(lines[i], " "+w+" ") {
				t.Errorf("--filter %q line %d = %q, want %q", c.filter, i, lines[i], w)
			}
		}
	}
	// Non-RoCE frames are printed without a filter and skipped with one.
	rxe := "../../testdata/rxe/rc_pingpong.pcap"
	all, _, err := run(t, "dump", rxe)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(all, "non-RoCE IPv4 TCP") || !strings.Contains(all, "non-RoCE ARP") {
		t.Errorf("unfiltered dump lacks non-RoCE lines:\n%s", all)
	}
	roce, _, _ := run(t, "dump", rxe, "--filter", "roce")
	if strings.Contains(roce, "non-RoCE") || strings.Count(roce, "\n") != 20 {
		t.Errorf("--filter roce printed:\n%s", roce)
	}
}

func TestDumpJSON(t *testing.T) {
	path := filepath.Join(goldenDir, "rc_atomic.pcapng")
	for _, args := range [][]string{{"dump", "--json", path}, {"dump", path, "--format", "json-line"}} {
		out, _, err := run(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			t.Fatalf("%q: %d lines", args, len(lines))
		}
		var rec struct {
			Schema int    `json:"schema"`
			File   string `json:"file"`
			Index  int    `json:"index"`
			Dir    string `json:"dir"`
			BTH    struct {
				Opcode string `json:"opcode"`
			} `json:"bth"`
			AtomicETH struct {
				SwapAdd string `json:"swap_add"`
			} `json:"atomic_eth"`
			ICRC struct{ OK bool } `json:"icrc"`
		}
		if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Schema != 1 || rec.File != path || rec.Index != 1 || rec.Dir != "out" || rec.BTH.Opcode != "RC_COMPARE_SWAP" ||
			rec.AtomicETH.SwapAdd != "0x1111222233334444" || !rec.ICRC.OK {
			t.Errorf("%q: first record %+v", args, rec)
		}
	}
	out, _, err := run(t, "dump", "--format", "json", path, filepath.Join(goldenDir, "vlan.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Schema int `json:"schema"`
		Files  []struct {
			File   string            `json:"file"`
			Format string            `json:"format"`
			Frames []json.RawMessage `json:"frames"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--format json: %v\n%s", err, out)
	}
	if doc.Schema != 1 || len(doc.Files) != 2 || len(doc.Files[0].Frames) != 4 || len(doc.Files[1].Frames) != 2 || doc.Files[1].Format != "pcapng" {
		t.Errorf("--format json document: %+v", doc)
	}
}

func TestDumpVerifyFails(t *testing.T) {
	out, _, err := run(t, "dump", "--verify", "../../testdata/malformed/flipped_byte.pcapng")
	if err == nil || ExitCode(err) != 1 {
		t.Fatalf("verify of a flipped byte: %v", err)
	}
	if want := "dump: verify: 13 frames, 13 RoCE frames, 1 with a bad ICRC, 0 that do not decode; first bad: ../../testdata/malformed/flipped_byte.pcapng frame 1"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if !strings.Contains(out, "icrc BAD") {
		t.Errorf("output lacks the bad frame:\n%s", out)
	}
	// Without --verify the same file is fine.
	if _, _, err := run(t, "dump", "../../testdata/malformed/flipped_byte.pcapng"); err != nil {
		t.Errorf("dump without --verify: %v", err)
	}
}

func TestLogLevel(t *testing.T) {
	path := filepath.Join(goldenDir, "vlan.pcapng")
	_, errOut, err := run(t, "--log-level", "debug", "dump", path)
	if err != nil || !strings.Contains(errOut, "level=DEBUG msg=running command=dump") {
		t.Errorf("--log-level debug: %v, stderr %q", err, errOut)
	}
	_, errOut, _ = run(t, "dump", path, "--log-level=info")
	if !strings.Contains(errOut, "msg=\"dump done\"") || strings.Contains(errOut, "DEBUG") {
		t.Errorf("dump --log-level=info: stderr %q", errOut)
	}
	_, errOut, _ = run(t, "dump", path)
	if errOut != "" {
		t.Errorf("default level: stderr %q", errOut)
	}
	t.Setenv(envLogLevel, "debug")
	_, errOut, _ = run(t, "dump", path)
	if !strings.Contains(errOut, "DEBUG") {
		t.Errorf("%s=debug: stderr %q", envLogLevel, errOut)
	}
}

// TestBinaryVerify runs the built binary: --verify passes on every real rxe
// capture and every golden capture, and fails with one clear line on every
// file in testdata/malformed.
func TestBinaryVerify(t *testing.T) {
	var good []string
	for _, pat := range []string{"../../testdata/rxe/*.pcap", "../../testdata/rxe/*.pcapng", goldenDir + "/*.pcapng"} {
		m, _ := filepath.Glob(pat)
		good = append(good, m...)
	}
	if len(good) < 20 {
		t.Fatalf("only %d captures found: %q", len(good), good)
	}
	for _, f := range good {
		cmd := exec.Command(binary, "dump", "--verify", f)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("xdproce dump --verify %s: %v\n%s", f, err, stderr.String())
		}
		lines := strings.Count(string(out), "\n")
		want := fmt.Sprintf("verify: %d frames, ", lines)
		if lines == 0 || !strings.HasPrefix(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 ||
			!strings.HasSuffix(stderr.String(), " 0 with a bad ICRC, 0 that do not decode\n") {
			t.Errorf("%s: %d lines of output, stderr %q; want one summary line %q...", f, lines, stderr.String(), want)
		}
	}
	// All at once too: one run, every line prefixed with its file name.
	all := exec.Command(binary, append([]string{"dump", "--verify"}, good...)...)
	var allErr bytes.Buffer
	all.Stderr = &allErr
	out, err := all.Output()
	if err != nil || !strings.HasPrefix(allErr.String(), "verify: ") || strings.Count(allErr.String(), "\n") != 1 {
		t.Errorf("dump --verify of all captures: %v, stderr %q\n%s", err, allErr.String(), out[max(0, len(out)-500):])
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.Contains(line, ".pcap: ") && !strings.Contains(line, ".pcapng: ") {
			t.Errorf("line without a file name: %q", line)
			break
		}
	}
	// "-" reads standard input.
	golden := filepath.Join(goldenDir, "rc_read.pcapng")
	want, _ := os.ReadFile(filepath.Join(goldenDir, "rc_read.txt"))
	stdin, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	cmd := exec.Command(binary, "dump", "--verify", "-")
	cmd.Stdin = stdin
	if out, err := cmd.Output(); err != nil || string(out) != string(want) {
		t.Errorf("dump - < %s: %v\n%s", golden, err, out)
	}

	bad, _ := filepath.Glob("../../testdata/malformed/*")
	if len(bad) < 4 {
		t.Fatalf("only %d malformed files", len(bad))
	}
	for _, f := range bad {
		if filepath.Base(f) == "truncated.pcapng" {
			continue // read up to its last whole frame: TestDumpTruncated
		}
		cmd := exec.Command(binary, "dump", "--verify", f)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Stdout = new(bytes.Buffer)
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("xdproce dump --verify %s: %v, want exit status 1", f, err)
		}
		msg := stderr.String()
		if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "xdproce: dump: ") {
			t.Errorf("%s: stderr is not one clear line: %q", f, msg)
		}
		t.Logf("%s: %s", filepath.Base(f), strings.TrimSpace(msg))
	}

	// Exit codes of the binary itself.
	for _, tt := range []struct {
		args []string
		code int
	}{{[]string{"-h"}, 0}, {[]string{"dump", "-h"}, 0}, {[]string{"--version"}, 0}, {nil, 2}, {[]string{"nope"}, 2}, {[]string{"dump"}, 2},
		{[]string{"dump", "/nonexistent.pcap"}, 1}} {
		err := exec.Command(binary, tt.args...).Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tt.code {
			t.Errorf("xdproce %q: exit %d, want %d", tt.args, code, tt.code)
		}
	}
}

// TestDumpEnlargeControl: the enlargement layer's control messages are named
// (its describer is registered through the import in describers.go).
func TestDumpEnlargeControl(t *testing.T) {
	path := filepath.Join(goldenDir, "enlarge-promote-8k.pcapng")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("enlarge golden capture missing: %v", err)
	}
	out, _, err := run(t, "dump", "--verify", path, "--filter", "op=RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[ENLARGE_REQ phase=1 size=", "[ENLARGE_ACK addr=0x", "[ENLARGE_CREDIT phase=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump lacks %q:\n%s", want, out)
		}
	}
	js, _, err := run(t, "dump", "--json", path)
	if err != nil || !strings.Contains(js, `"payload_kind":"enlarge"`) {
		t.Errorf("JSON lacks payload_kind enlarge: %v", err)
	}
}

// TestDumpTruncated: a capture that ends inside a block (as one still being
// written) lists its whole frames, warns once on stderr and passes
// --verify.
func TestDumpTruncated(t *testing.T) {
	full, err := os.ReadFile(filepath.Join(goldenDir, "rc_read.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(goldenDir, "rc_read.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(want), "\n")
	lines = lines[:len(lines)-1] // after the final newline
	cut := filepath.Join(t.TempDir(), "cut.pcapng")
	if err := os.WriteFile(cut, full[:len(full)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"dump", cut}, {"dump", "--verify", cut}} {
		out, errOut, err := run(t, args...)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if wantOut := strings.Join(lines[:len(lines)-1], ""); out != wantOut {
			t.Errorf("%q printed:\n%s\nwant all frames but the cut one:\n%s", args, out, wantOut)
		}
		warn := fmt.Sprintf("dump: warning: %s ends inside a block after %d complete frames", cut, len(lines)-1)
		if !strings.HasPrefix(errOut, warn) || strings.Count(errOut, "warning") != 1 {
			t.Errorf("%q: stderr %q, want a warning %q", args, errOut, warn)
		}
		if args[1] == "--verify" && !strings.Contains(errOut, fmt.Sprintf("verify: %d frames, ", len(lines)-1)) {
			t.Errorf("--verify summary missing: %q", errOut)
		}
	}
	r := runBinary(t, "dump", "--verify", "../../testdata/malformed/truncated.pcapng")
	if r.code != 0 || !strings.Contains(r.stderr, "warning") || r.stdout == "" {
		t.Errorf("dump --verify truncated.pcapng: exit %d, stderr %q, %d bytes out", r.code, r.stderr, len(r.stdout))
	}
}

// TestVersionCommand: 'xdproce version' prints the module, and the VCS
// revision, its time and whether the checkout was modified when the build
// recorded them (this test binary's build may not: GOFLAGS=-buildvcs=false,
// or a git worktree, which go build does not stamp).
func TestVersionCommand(t *testing.T) {
	r := runBinary(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "xdproce ") || !strings.Contains(r.stdout, "\nmodule   github.com/xdproce/xdproce ") ||
		!strings.Contains(r.stdout, "\ngo       go1.") {
		t.Errorf("version: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/xdproce/xdproce", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0155fc4d99f2a3eba74ac22ea2b24620027be1c7"},
			{Key: "vcs.time", Value: "2026-11-25T12:30:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "xdproce v0.3.0 (0155fc4d99f2-dirty) go1.26.8\nmodule   github.com/xdproce/xdproce v0.3.0\n" +
		"revision 0155fc4d99f2a3eba74ac22ea2b24620027be1c7 (modified)\ntime     2026-11-25T12:30:00Z\ngo       go1.26.8"
	if got := strings.Join(versionLines(bi), "\n"); got != want {
		t.Errorf("lines:\n%s\nwant:\n%s", got, want)
	}
	bi.Settings = nil
	if got := strings.Join(versionLines(bi), "\n"); got != "xdproce v0.3.0 go1.26.8\nmodule   github.com/xdproce/xdproce v0.3.0\ngo       go1.26.8" {
		t.Errorf("without VCS: %q", got)
	}
	if r := runBinary(t, "version", "x"); r.code != 2 {
		t.Errorf("version x: exit %d", r.code)
	}
	for _, args := range [][]string{{"help", "-h"}, {"help", "--help"}, {"help", "version"}, {"version", "-h"}} {
		if r := runBinary(t, args...); r.code != 0 || !strings.Contains(r.stdout, "USAGE") {
			t.Errorf("%q: exit %d, %q", args, r.code, r.stderr)
		}
	}
}

// TestBDPFlag: --bdp (send, get, serve, bench) sets ConnectOptions.BDP from
// a size, 0 by default, and refuses what is not a size or is absurd.
func TestBDPFlag(t *testing.T) {
	for _, c := range []struct {
		arg  []string
		want int
		err  string
	}{
		{nil, 0, ""},
		{[]string{"--bdp", "256KiB"}, 256 << 10, ""},
		{[]string{"--bdp", "1.5MiB"}, 3 << 19, ""},
		{[]string{"--bdp", "-1"}, 0, `--bdp "-1"`},
		{[]string{"--bdp", "2TiB"}, 0, `--bdp "2TiB"`},
		{[]string{"--bdp", "lots"}, 0, `--bdp "lots": want a size such as 256KiB, or 0`},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var rf relFlag
		rf.register(fs)
		if err := fs.Parse(c.arg); err != nil {
			t.Fatal(err)
		}
		var co roce.ConnectOptions
		err := rf.applyTo("xdproce send", &co)
		switch {
		case c.err == "" && (err != nil || co.BDP != c.want):
			t.Errorf("%q: BDP %d, %v; want %d", c.arg, co.BDP, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || ExitCode(err) != 2):
			t.Errorf("%q: %v, want a usage error with %q", c.arg, err, c.err)
		}
	}
}
