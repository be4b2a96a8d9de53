package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// TestPrivilegedUcmatoseMany (issue 19, must-show 3): 1,000 RDMA CM
// connections (10,000 with -long) between two xdproce processes, the
// ucmatose server and client in two namespaces over a veth (AF_XDP): all
// established at once, ten SENDs each way over each, the server's
// disconnects; both print cmatose's lines and, with --stats, that after
// the teardown their CM agents track no connection, their devices hold no
// queue pair but QP1, and their protection domain (every connection's
// queue pair and buffer) is freed. The rate and memory are logged, not asserted.
func TestPrivilegedUcmatoseMany(t *testing.T) {
	testenv.Privileged(t)
	n, budget := 1_000, 3*time.Minute
	if *long {
		n, budget = 10_000, 8*time.Minute
	}
	topo := netlab.Pair(t, netlab.LinkConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), budget)
	defer cancel()
	c := strconv.Itoa(n)
	srvErr, cliErr := runCmatose(t, ctx, topo, []string{"-c", c, "--stats"}, []string{"-c", c, "--stats"})
	for _, e := range []struct{ who, stderr string }{{"server", srvErr}, {"client", cliErr}} {
		t.Logf("%s (%d connections):\n%s", e.who, n, e.stderr)
		if !strings.Contains(e.stderr, fmt.Sprintf("ucmatose: %d connections established in ", n)) ||
			!strings.Contains(e.stderr, "ucmatose: left: 0 CM connections, 1 queue pairs (QP1 included); protection domain freed;") {
			t.Errorf("%s's --stats: want %d connections established and nothing left but QP1:\n%s", e.who, n, e.stderr)
		}
	}
}
