package daemon

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// Snapshot reports the daemon's counters for 'xdproce stat' (it is a
// stat.Source): the switch's own, the process's open descriptors and
// goroutines (which return to their level when clients go), and, asked
// for per queue pair, one entry per client: QPN is the first of its range,
// Type "client", State its PID and command.
func (d *Daemon) Snapshot(perClient bool) *roce.Snapshot {
	st := d.Stats()
	snap := &roce.Snapshot{Time: time.Now(), Device: d.up.Name, Link: "daemon (" + d.LinkName() + ")",
		QPs: len(st.Clients)}
	snap.Counters = roce.Counters{
		{Name: "clients", Value: uint64(len(st.Clients))},
		{Name: "wire_rx_frames", Value: st.WireRx},
		{Name: "wire_tx_frames", Value: st.WireTx},
		{Name: "switched_frames", Value: st.Switched},
		{Name: "drop_no_owner", Value: st.DropNoOwner},
		{Name: "drop_qp1", Value: st.DropQP1},
		{Name: "cm_answered", Value: st.CMAnswered},
		{Name: "group_frames", Value: st.GroupFrames},
		{Name: "drop_wire_malformed", Value: st.DropWireBad},
		{Name: "egress_full_waits", Value: st.EgressFull},
		{Name: "wire_errors", Value: st.WireErrors},
		{Name: "drop_no_neighbor", Value: st.DropNoNeighbor},
		{Name: "drop_foreign_conn", Value: st.DropForeignConn},
		{Name: "placed_messages", Value: st.Placed},
		{Name: "placed_bytes", Value: st.PlacedBytes},
		{Name: "place_fallbacks", Value: st.PlaceFallbacks},
		{Name: "place_answered", Value: st.PlaceAnswered},
		{Name: "place_bad", Value: st.PlaceBad},
		{Name: "place_failed", Value: st.PlaceFailed},
		{Name: "place_granted", Value: st.PlaceGranted},
		{Name: "open_fds", Value: openFDs()},
		{Name: "goroutines", Value: uint64(runtime.NumGoroutine())},
		{Name: "rss_bytes", Value: rss()},
	}
	c, err := d.up.XDPCounters()
	if err != nil {
		snap.XDPError = err.Error()
	}
	if len(c) > 0 {
		snap.XDP = c
	}
	if perClient {
		for _, c := range st.Clients {
			snap.PerQP = append(snap.PerQP, roce.QPSnapshot{QPN: c.QPNFirst, Type: "client",
				State: "pid " + strconv.Itoa(int(c.PID)) + " uid " + strconv.Itoa(int(c.UID)) + " " + c.Command,
				Counters: roce.Counters{
					{Name: "client", Value: uint64(c.ID)},
					{Name: "qpn_last", Value: uint64(c.QPNLast)},
					{Name: "frames_from_client", Value: c.FromClient},
					{Name: "frames_to_client", Value: c.ToClient},
					{Name: "drop_foreign_qpn", Value: c.DropForeign},
					{Name: "drop_foreign_conn", Value: c.DropForeignConn},
					{Name: "connected_qps", Value: uint64(c.Conns)},
					{Name: "drop_bad_source", Value: c.DropBadSource},
					{Name: "drop_malformed", Value: c.DropMalformed},
					{Name: "drop_port_full", Value: c.Overflow},
					{Name: "cm_services", Value: uint64(c.Services)},
					{Name: "groups", Value: uint64(c.Groups)},
					{Name: "shared_regions", Value: uint64(c.Regions)},
					{Name: "shared_bytes", Value: uint64(c.SharedBytes)},
				}})
		}
	}
	return snap
}

// rss is this process's resident set size in bytes (0 when /proc cannot be
// read): ports are unmapped when their clients go.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// openFDs counts this process's open file descriptors (0 when /proc cannot
// be read).
func openFDs() uint64 {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return uint64(len(ents))
}
