// Package stat publishes a running xdproce process's device counters
// (roce.Device.Snapshot) to other processes and reads them back.
//
// Each device a command opens gets a unix socket in the file system (not an
// abstract one, which another network namespace could not see), mode 0600,
// in a directory of mode 0700: /run/xdproce when the process runs as root,
// else $XDG_RUNTIME_DIR/xdproce ($XDPROCE_RUN_DIR overrides both). Its name,
// PID.NETNS.IFNAME.sock, carries the process ID, the inode of the network
// namespace and the interface name, so that lookups by PID or by interface
// work without connecting and two namespaces with the same interface name do
// not collide. A client connects, writes one request line ("qp" asks for
// per-queue-pair counters too) and reads one JSON Reply. The socket is
// removed when the device closes; sockets of processes that are gone are
// removed by the next lookup.
//
// The package also serves the same counters to Prometheus (Metrics).
package stat
