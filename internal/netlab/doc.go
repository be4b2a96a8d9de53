// Package netlab builds throwaway network labs for tests, benchmarks and
// `xdproce demo`: network namespaces joined by veth pairs, addressed from
// 198.51.100.0/24 and 2001:db8::/64, and an impairment relay (a middle
// namespace that forwards frames between two veths with seeded loss, reorder,
// duplication, corruption and delay, counting what it did).
//
// Everything a Lab creates lives inside namespaces named
// "xdl-<pid>-<lab>-<name>"; deleting the namespaces removes the veths with
// them. Close removes the lab; NewT registers Close with t.Cleanup so a failing
// test cleans up too; and New removes the namespaces of earlier runs whose
// process is gone (a crashed or SIGKILLed test).
//
// Setting up uses iproute2 (`ip`) and ethtool; running code inside a namespace
// uses setns(2) on a locked OS thread (NS.Do). It needs root (CAP_SYS_ADMIN for
// namespaces, CAP_NET_ADMIN, CAP_NET_RAW for the relay). The root namespace is
// never touched. Linux only: elsewhere the package builds, but entering a
// namespace (NS.Do) and starting a relay fail.
package netlab
