package bpf

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkPrivilegedSteer measures the program's cost per frame in the
// kernel (BPF_PROG_TEST_RUN with repeat): a RoCE frame redirected to a
// socket, and a TCP frame passed.
func BenchmarkPrivilegedSteer(b *testing.B) {
	p := loadForTest(b)
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if err := p.SetSocket(0, fd); err != nil {
		b.Fatal(err)
	}
	cases := steerCases(b)
	for _, c := range []int{0, 3, 10} { // roce-v4, roce-v6, tcp-v4
		b.Run(cases[c].name, func(b *testing.B) {
			f := cases[c].frame
			b.SetBytes(int64(len(f)))
			ret, d, err := p.objs.XdpSteer.Benchmark(f, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			want := uint32(2)
			if cases[c].want == Redirected {
				want = 4
			}
			if ret != want {
				b.Fatalf("action %d, want %d", ret, want)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/frame")
		})
	}
}
