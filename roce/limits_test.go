package roce_test

import (
	"errors"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestDeviceLimits: Options.MaxQPs and Options.MaxMRs are enforced with
// ErrLimit, and freeing one makes room for the next.
func TestDeviceLimits(t *testing.T) {
	la, _, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := roce.NewDevice(la, &roce.Options{MaxQPs: 3, MaxMRs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	pd := d.AllocPD()
	var qps []*roce.QP
	for i := range 3 {
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatalf("QP %d of 3: %v", i+1, err)
		}
		qps = append(qps, q)
	}
	if _, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq}); !errors.Is(err, roce.ErrLimit) {
		t.Fatalf("4th QP with MaxQPs 3: %v, want ErrLimit", err)
	} else {
		t.Logf("4th QP: %v", err)
	}
	if err := qps[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq}); err != nil {
		t.Fatalf("QP after destroying one: %v", err)
	}

	m1, err := pd.RegMR(make([]byte, 64), roce.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(make([]byte, 64), roce.LocalWrite); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(make([]byte, 64), roce.LocalWrite); !errors.Is(err, roce.ErrLimit) {
		t.Fatalf("3rd MR with MaxMRs 2: %v, want ErrLimit", err)
	}
	if err := m1.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(make([]byte, 64), roce.LocalWrite); err != nil {
		t.Fatalf("MR after deregistering one: %v", err)
	}
}
