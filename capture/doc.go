// Package capture records and reads packet captures of RoCEv2 traffic.
//
// Writer writes pcapng (nanosecond timestamps, one interface per link, the
// direction of every frame in epb_flags); Wrap puts one in front of any
// link.Link so that every frame sent and received is recorded. Reader reads
// pcap and pcapng files (format detected by the magic number).
//
// Concurrency: a Writer is safe for concurrent use; a Reader is not. A
// wrapped link keeps the concurrency rules of link.Link.
package capture
