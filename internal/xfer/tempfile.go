package xfer

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Temporary files. A file being received is written to
//
//	.NAME.xdproce-PID-START-RANDOM.part
//
// in the destination directory, where PID is the receiving process and START
// its start time (clock ticks since boot, field 22 of /proc/PID/stat), so that
// the owner of a temporary file can be told even after its PID is reused.
// A receiver that is killed cannot remove its file; RemoveStale, which
// `xdproce serve` runs at start-up and `xdproce get` in its target directory,
// removes the ones whose owner is gone. Every name is opened beneath the
// directory's os.Root: nothing outside it is created, renamed or removed.

const (
	tempPrefix = ".xdproce-"
	tempSuffix = ".part"
	// StaleAge is how long a temporary file without an owner in its name
	// (written by versions before owners were recorded) must have been left
	// untouched before RemoveStale takes it for abandoned.
	StaleAge = 10 * time.Minute
)

// self is this process's owner tag "PID-START".
var self = func() string {
	start, _ := procStart(os.Getpid())
	return strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(start, 10)
}()

// tempFile is a file being received, named name inside root, to become dst.
type tempFile struct {
	*os.File
	root      *os.Root
	name      string
	dst       string
	ownRoot   bool // createTemp opened root for this file
	committed bool // commit ran (and cleaned up after itself)
}

// createTemp creates the temporary file a download to the path dst is
// written to, in dst's directory (so that the rename stays on one file
// system). The caller closes the root with discard or commit.
func createTemp(dst string) (*tempFile, error) {
	dir, base := filepath.Split(dst)
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("create temporary file: %w", err)
	}
	t, err := createTempIn(root, base)
	if err != nil {
		root.Close()
		return nil, err
	}
	t.ownRoot = true
	return t, nil
}

// createTempIn creates the temporary file for dst (a name in root).
func createTempIn(root *os.Root, dst string) (*tempFile, error) {
	for range 100 {
		name := "." + dst + tempPrefix + self + "-" + strconv.FormatUint(uint64(rand.Uint32()), 10) + tempSuffix
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create temporary file: %w", err)
		}
		return &tempFile{File: f, root: root, name: name, dst: dst}, nil
	}
	return nil, errors.New("create temporary file: 100 names taken")
}

// discard closes and removes the temporary file.
func (t *tempFile) discard() {
	t.Close()
	t.root.Remove(t.name)
	t.done()
}

func (t *tempFile) done() {
	if t.ownRoot {
		t.root.Close()
	}
}

// ErrExists: the file to receive is already there and may not be replaced.
var ErrExists = errors.New("file exists")

// commit syncs and closes the temporary file and gives it its final name:
// replacing a file already there when overwrite is set, else failing with
// ErrExists (a hard link, which never replaces, then removing the temporary
// name; where the file system has no hard links, a check and a rename). On
// failure the temporary file is removed too.
func (t *tempFile) commit(overwrite bool) (err error) {
	t.committed = true
	defer func() {
		if err != nil {
			t.Close()
			t.root.Remove(t.name)
		}
		t.done()
	}()
	if err := t.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", t.name, err)
	}
	if err := t.Close(); err != nil {
		return fmt.Errorf("close %s: %w", t.name, err)
	}
	if err := t.root.Chmod(t.name, 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", t.name, err)
	}
	if overwrite {
		if err := t.root.Rename(t.name, t.dst); err != nil {
			return fmt.Errorf("rename to %s: %w", t.dst, err)
		}
		return nil
	}
	err = t.root.Link(t.name, t.dst)
	switch {
	case err == nil:
		t.root.Remove(t.name)
		return nil
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%q: %w", t.dst, ErrExists)
	}
	// A file system without hard links (vfat, some FUSE): check, then
	// rename; a file created in between would be replaced.
	if _, lerr := t.root.Lstat(t.dst); lerr == nil {
		return fmt.Errorf("%q: %w", t.dst, ErrExists)
	}
	if err := t.root.Rename(t.name, t.dst); err != nil {
		return fmt.Errorf("rename to %s: %w", t.dst, err)
	}
	return nil
}

// procStart returns the start time of process pid (clock ticks after boot).
// err wraps fs.ErrNotExist when there is no such process.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses, so
	// the fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	const startField = 22 - 3 // field 3 (state) is f[0]
	if len(f) <= startField {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[startField], 10, 64)
}

// tempOwner parses a temporary file's name: ok is false when name is not
// one of ours; owned is false for the older form without an owner.
func tempOwner(name string) (pid int, start uint64, owned, ok bool) {
	if !strings.HasPrefix(name, ".") || !strings.HasSuffix(name, tempSuffix) {
		return 0, 0, false, false
	}
	i := strings.LastIndex(name, tempPrefix)
	if i < 1 {
		return 0, 0, false, false
	}
	parts := strings.Split(strings.TrimSuffix(name[i+len(tempPrefix):], tempSuffix), "-")
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 64); err != nil || p == "" {
			return 0, 0, false, false
		}
	}
	switch len(parts) {
	case 1: // .NAME.xdproce-RANDOM.part
		return 0, 0, false, true
	case 3: // .NAME.xdproce-PID-START-RANDOM.part
		pid, err := strconv.Atoi(parts[0])
		if err != nil || pid <= 0 {
			return 0, 0, false, false
		}
		start, _ := strconv.ParseUint(parts[1], 10, 64)
		return pid, start, true, true
	}
	return 0, 0, false, false
}

// alive reports whether the process that created a temporary file still
// runs. When in doubt (no /proc, a start time of 0), it says yes.
func alive(pid int, start uint64) bool {
	got, err := procStart(pid)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false
	case err != nil || start == 0:
		return true
	}
	return got == start
}

// RemoveStale removes the temporary files in dir that belong to no live
// transfer: those whose owning process is gone (or whose PID now belongs to
// another process), and those without an owner in their name untouched for
// StaleAge. Files of live processes, this one included, are kept. It returns
// the names it removed; err reports the first failure (the others are still
// tried).
func RemoveStale(dir string) (removed []string, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("remove stale temporary files: %w", err)
	}
	defer root.Close()
	return removeStaleIn(root)
}

func removeStaleIn(root *os.Root) (removed []string, err error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("remove stale temporary files: %w", err)
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("remove stale temporary files: %w", err)
	}
	var first error
	for _, e := range ents {
		pid, start, owned, ok := tempOwner(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if owned && alive(pid, start) {
			continue
		}
		if !owned {
			info, err := e.Info()
			if err != nil || time.Since(info.ModTime()) < StaleAge {
				continue
			}
		}
		if err := root.Remove(e.Name()); err != nil {
			if first == nil && !errors.Is(err, fs.ErrNotExist) {
				first = fmt.Errorf("remove stale temporary file: %w", err)
			}
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, first
}
