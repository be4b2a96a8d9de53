//go:build !linux

package roce

// AnnouncedDaemon finds no daemon: the xdproce daemon is Linux only.
func AnnouncedDaemon(ifindex int) (path string, pid int) { return "", 0 }
