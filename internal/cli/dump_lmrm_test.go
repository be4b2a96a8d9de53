package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDumpLMRMAlloc: dump --verify passes on the LMRM golden capture and
// names its control messages (lmrm's describer is registered through the
// import in describers.go).
func TestDumpLMRMAlloc(t *testing.T) {
	path := filepath.Join(goldenDir, "lmrm-alloc.pcapng")
	out, errOut, err := run(t, "dump", "--verify", path)
	if err != nil {
		t.Fatalf("dump --verify: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "0 with a bad ICRC, 0 that do not decode") {
		t.Errorf("verify summary: %q", errOut)
	}
	for _, want := range []string{"[LMRM_ALLOC bytes=2048 min_slot=256]", "[LMRM_ALLOC_ACK pool=0 addr=0x", "count=8 ok]",
		"[LMRM_RELEASE pool=0 n=2 slots=0,1]", "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "[LMRM_"); n != 10 {
		t.Errorf("dump names %d LMRM messages, want 10 (1 ALLOC, 1 ALLOC_ACK, 8 RELEASE)", n)
	}
}
