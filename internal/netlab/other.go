//go:build !linux

package netlab

import (
	"fmt"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Do needs Linux network namespaces (setns(2)); elsewhere it fails.
func (n *NS) Do(fn func() error) error {
	return fmt.Errorf("netlab: enter namespace %s: network namespaces need Linux, not %s", n.Name, runtime.GOOS)
}

// openPacket needs Linux (AF_PACKET); elsewhere the relay cannot start.
func openPacket(ifindex int) (int, error) {
	return -1, fmt.Errorf("AF_PACKET needs Linux, not %s", runtime.GOOS)
}

// pollIn waits up to timeout, rounded up to milliseconds, for pfd's events.
func pollIn(pfd []unix.PollFd, timeout time.Duration) error {
	_, err := unix.Poll(pfd, int((timeout+time.Millisecond-1)/time.Millisecond))
	return err
}

type batchReader struct{}

func newBatchReader(int) *batchReader { return &batchReader{} }

// read needs Linux (recvmmsg on AF_PACKET); the relay never starts elsewhere.
func (*batchReader) read(int, [][]byte, []int) (int, error) {
	return 0, fmt.Errorf("AF_PACKET needs Linux, not %s", runtime.GOOS)
}

// dieWithParent does nothing here: only Linux has PR_SET_PDEATHSIG.
func dieWithParent(*exec.Cmd) {}
