package xfer

import (
	"os"

	"golang.org/x/sys/unix"
)

// freeSpace returns the bytes an unprivileged writer may still use on the
// file system of root (statfs's available blocks); ok is false when it
// cannot tell.
func freeSpace(root *os.Root) (free int64, ok bool) {
	d, err := root.Open(".")
	if err != nil {
		return 0, false
	}
	defer d.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
