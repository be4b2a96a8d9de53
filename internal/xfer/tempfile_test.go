package xfer

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTempNames: a temporary file names its owner (this process) and parses
// back; names of other shapes are not ours.
func TestTempNames(t *testing.T) {
	dir := t.TempDir()
	f, err := createTemp(filepath.Join(dir, "data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	base := filepath.Base(f.Name())
	if !strings.HasPrefix(base, ".data.bin.xdproce-"+strconv.Itoa(os.Getpid())+"-") || !strings.HasSuffix(base, ".part") {
		t.Errorf("temporary name %q", base)
	}
	pid, start, owned, ok := tempOwner(base)
	myStart, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !ok || !owned || pid != os.Getpid() || start != myStart || start == 0 || !alive(pid, start) {
		t.Errorf("tempOwner(%q) = %d, %d, %v, %v; want pid %d start %d", base, pid, start, owned, ok, os.Getpid(), myStart)
	}
	for _, tt := range []struct {
		name         string
		owned, isOur bool
	}{
		{".a.xdproce-123.part", false, true},
		{".a.xdproce-1-2-3.part", true, true},
		{".x.xdproce-9.xdproce-1-2-3.part", true, true},
		{"a.xdproce-1-2-3.part", false, false},
		{".a.xdproce-1-2.part", false, false},
		{".a.xdproce-1-x-3.part", false, false},
		{".a.xdproce-.part", false, false},
		{".a.xdproce-1-2-3.partial", false, false},
		{".a.part", false, false},
	} {
		_, _, owned, ok := tempOwner(tt.name)
		if owned != tt.owned || ok != tt.isOur {
			t.Errorf("tempOwner(%q): owned %v ours %v, want %v %v", tt.name, owned, ok, tt.owned, tt.isOur)
		}
	}
}

// TestRemoveStale: temporary files of a dead process, of a reused PID and
// old unowned ones are removed; this process's, a live process's, recent
// unowned ones and other files stay.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	// A process that has exited: its PID and start time name a dead owner.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadPID := cmd.Process.Pid
	deadStart, _ := procStart(deadPID)
	cmd.Wait()
	if deadStart == 0 {
		deadStart = 1
	}
	// A live process.
	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	var liveStart uint64
	for i := 0; i < 100 && liveStart == 0; i++ {
		liveStart, _ = procStart(live.Process.Pid)
	}
	mine, err := createTemp(filepath.Join(dir, "mine"))
	if err != nil {
		t.Fatal(err)
	}
	mine.Close()
	self, _ := procStart(os.Getpid())
	tag := func(pid int, start uint64) string {
		return strconv.Itoa(pid) + "-" + strconv.FormatUint(start, 10)
	}
	files := map[string]bool{ // name → removed
		filepath.Base(mine.Name()):                                       false,
		".dead.xdproce-" + tag(deadPID, deadStart) + "-77.part":          true,
		".reused.xdproce-" + tag(os.Getpid(), self+12345) + "-78.part":   true,
		".live.xdproce-" + tag(live.Process.Pid, liveStart) + "-79.part": false,
		".old.xdproce-123456.part":                                       true,
		".recent.xdproce-123457.part":                                    false,
		"dead.xdproce-" + tag(deadPID, deadStart) + "-80.part":           false, // not hidden: not ours
		"notes.txt": false,
	}
	for name := range files {
		if name == filepath.Base(mine.Name()) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-StaleAge - time.Minute)
	os.Chtimes(filepath.Join(dir, ".old.xdproce-123456.part"), old, old)
	removed, err := RemoveStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for name, gone := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone {
			want = append(want, name)
			if !os.IsNotExist(err) {
				t.Errorf("%s kept", name)
			}
		} else if err != nil {
			t.Errorf("%s removed: %v", name, err)
		}
	}
	slices.Sort(want)
	slices.Sort(removed)
	if !slices.Equal(removed, want) {
		t.Errorf("RemoveStale reported %q, want %q", removed, want)
	}
	if _, err := RemoveStale(filepath.Join(dir, "nope")); err == nil {
		t.Error("RemoveStale of a missing directory succeeded")
	}
}
