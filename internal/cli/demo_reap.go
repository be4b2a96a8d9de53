package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// demoDirPrefix names the work directory of the demo run by pid, so that a
// later demo can tell whose it was.
func demoDirPrefix(pid int) string { return "xdproce-demo-" + strconv.Itoa(pid) + "-" }

// reapDemoDirs removes the work directories of demos whose process is gone
// (killed outright, so their deferred clean-up never ran). Their lab
// namespaces are removed by netlab when the next lab is built.
func reapDemoDirs(env *Env) {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "xdproce-demo-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pidAlive(pid) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		if err := os.RemoveAll(path); err == nil {
			env.Log.Info("removed the work directory of a demo that is gone", "dir", path, "pid", pid)
		}
	}
}

// pidAlive reports whether a process with that id exists (EPERM: it does,
// owned by someone else).
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
