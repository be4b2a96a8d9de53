package xfer

import (
	"errors"
	"fmt"
	"io/fs"
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
// `xdproce serve` runs at start-up, removes the ones whose owner is gone.

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

// createTemp creates the temporary file a download to dst is written to, in
// dst's directory (so that the rename stays on one file system).
func createTemp(dst string) (*os.File, error) {
	dir, base := filepath.Split(dst)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+tempPrefix+self+"-*"+tempSuffix)
	if err != nil {
		return nil, fmt.Errorf("create temporary file: %w", err)
	}
	return f, nil
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
	ents, err := os.ReadDir(dir)
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
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			if first == nil && !errors.Is(err, fs.ErrNotExist) {
				first = fmt.Errorf("remove stale temporary file: %w", err)
			}
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, first
}
