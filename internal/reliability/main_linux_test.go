package reliability

import (
	"flag"
	"os"
	"testing"
	"time"
)

var (
	long = flag.Bool("long", false, "run the long variants (256 MiB transfers through the relay)")
	soak = flag.Duration("soak", 20*time.Second, "duration of TestPrivilegedSoak (2m in CI's long run)")
)

// childEnv, when set, makes the test binary act as the peer process of
// TestPrivilegedPeerDeath instead of running tests.
const childEnv = "XDPROCE_RELIABILITY_PEER"

func TestMain(m *testing.M) {
	if ifname := os.Getenv(childEnv); ifname != "" {
		os.Exit(peerChild(ifname))
	}
	os.Exit(m.Run())
}
