package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/roce"
)

// daemonInfo is the xdproce daemon serving an interface, as info shows it.
type daemonInfo struct {
	PID     int            `json:"pid"`
	Socket  string         `json:"socket"`
	Clients []daemonClient `json:"clients"`
	// ClientsNote says why the clients are not listed (the daemon's stat
	// socket could not be read).
	ClientsNote string `json:"clients_note,omitempty"`
}

type daemonClient struct {
	Client   uint64 `json:"client"`
	Process  string `json:"process"` // "pid N uid U COMMAND"
	QPNFirst uint32 `json:"qpn_first"`
	QPNLast  uint64 `json:"qpn_last"`
}

// describeDaemon finds the daemon announced for the interface and its
// clients (from its stat socket); nil when no daemon serves it.
func describeDaemon(ifindex int) *daemonInfo {
	sock, pid := roce.AnnouncedDaemon(ifindex)
	if sock == "" {
		return nil
	}
	di := &daemonInfo{PID: pid, Socket: sock, Clients: []daemonClient{}}
	dir, err := stat.Dir()
	var entries []stat.Entry
	if err == nil {
		entries, err = stat.List(dir)
	}
	if err != nil {
		di.ClientsNote = err.Error()
		return di
	}
	for _, e := range entries {
		if e.PID != pid || pid == 0 {
			continue
		}
		rep, err := stat.Query(e.Path, true, 2*time.Second)
		if err != nil {
			di.ClientsNote = err.Error()
			return di
		}
		for _, c := range rep.PerQP {
			id, _ := c.Counters.Get("client")
			last, _ := c.Counters.Get("qpn_last")
			di.Clients = append(di.Clients, daemonClient{Client: id, Process: c.State, QPNFirst: c.QPN, QPNLast: last})
		}
		return di
	}
	di.ClientsNote = "the daemon's stat socket is not in " + dir
	return di
}

// printDaemon writes the daemon lines of an interface.
func printDaemon(w io.Writer, di *daemonInfo) {
	if di == nil {
		return
	}
	fmt.Fprintf(w, "  xdproce daemon: PID %d, socket %s, %d client(s)\n", di.PID, di.Socket, len(di.Clients))
	for _, c := range di.Clients {
		fmt.Fprintf(w, "    client %d: QPNs %#x..%#x, %s\n", c.Client, c.QPNFirst, c.QPNLast, c.Process)
	}
	if di.ClientsNote != "" {
		fmt.Fprintf(w, "    (clients unknown: %s)\n", di.ClientsNote)
	}
}
