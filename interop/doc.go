// Package interop is xdproce's interoperability suite against Linux Soft-RoCE (rxe) and the
// tools every RDMA user knows: rdma-core's ibv_rc_pingpong and perftest's ib_write_bw,
// ib_read_bw, ib_send_bw, ib_atomic_bw and ib_send_lat, with xdproce as server and as client.
//
// The peer is a QEMU guest built from Debian packages (build-image.sh, cached outside the
// clone in /var/cache/xdproce-interop) and booted once per suite on a tap device whose host end
// sits in a network namespace of its own (guest.sh; 198.51.100.1 host, 198.51.100.2 guest).
// `make interop` (run.sh) does all of it and prints the matrix tool × operation × role →
// pass/fail. The package has no API: its tests, TestPrivilegedInterop*, are the suite. They run
// when the image is cached, when XDPROCE_INTEROP=1 (which builds the image if needed), or
// against a guest run.sh booted (XDPROCE_INTEROP_STATE); otherwise they skip and say how to
// run them. XDPROCE_INTEROP=0 turns them off.
package interop
