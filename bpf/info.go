package bpf

import "github.com/cilium/ebpf"

// Name is the steering program's name in the kernel, as 'bpftool prog' and
// 'xdproce info' show it (the name of its function in xdp.c).
const Name = "xdp_steer"

// NameOf returns the kernel's name of the program with the given id, or ""
// when this process may not open it (that takes CAP_SYS_ADMIN).
func NameOf(id uint32) string {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Name
}
