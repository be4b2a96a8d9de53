package netlab

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a locked OS thread switched into the namespace. Sockets
// created in fn stay in the namespace and may be used from any goroutine
// afterwards; goroutines started in fn do not run in the namespace.
func (n *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: open own netns: %w", err)
	}
	defer unix.Close(orig)
	target, err := unix.Open(netnsDir+"/"+n.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: open netns %s: %w", n.Name, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: setns %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it exits with the goroutine instead of
		// running other code in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("netlab: restore netns: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// dieWithParent has the kernel send c SIGKILL when the thread that started
// it exits; Go keeps the threads of goroutines that are not locked to one,
// so in practice when this process exits.
func dieWithParent(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &unix.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = unix.SIGKILL
}
