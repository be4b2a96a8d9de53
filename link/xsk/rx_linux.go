package xsk

import (
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// Receive stores up to len(frames) received frames in frames and returns how
// many, without blocking. Frames alias the UMEM (multi-buffer frames too,
// joined in place, see join; rarely a reassembly buffer) and stay valid
// until the next Receive call; Receive returns the previous batch's chunks to
// the fill ring first.
func (s *Socket) Receive(frames [][]byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, link.ErrClosed
	}
	s.recycleRx()
	avail := s.rx.avail()
	if avail == 0 || len(frames) == 0 {
		s.kickFill()
		return 0, nil
	}
	n, sc := 0, 0
	i, end := s.rx.cons, s.rx.cons+avail
	done := i // descriptors consumed up to the end of the last whole frame
	for i != end && n < len(frames) {
		d := s.rx.desc(i)
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			// A whole frame in one chunk: alias it.
			s.rxHeld = append(s.rxHeld, d.Addr)
			frames[n] = s.umem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)]
			n++
			i++
			done = i
			continue
		}
		// A multi-buffer frame: find its last descriptor, then join.
		j, total := i, 0
		for j != end {
			dj := s.rx.desc(j)
			total += int(dj.Len)
			j++
			if dj.Options&unix.XDP_PKT_CONTD == 0 {
				break
			}
		}
		if s.rx.desc(j-1).Options&unix.XDP_PKT_CONTD != 0 {
			// The rest of the frame is not in the ring yet, as far as
			// the cached producer index shows: look again, and leave it
			// for the next call if it is not there.
			if s.rx.refresh(); s.rx.prod != end {
				end = s.rx.prod
				continue
			}
			break
		}
		if total > s.maxRx {
			for ; i != j; i++ {
				s.rxHeld = append(s.rxHeld, s.rx.desc(i).Addr)
			}
			done = i
			s.rxErrors.Add(1)
			continue
		}
		f := s.join(i, j, total)
		if f == nil {
			if sc == len(s.scratch) {
				break // out of reassembly buffers: the frame waits for the next call
			}
			f = s.scratch[sc][:total]
			sc++
			off := 0
			for k := i; k != j; k++ {
				dk := s.rx.desc(k)
				off += copy(f[off:], s.umem[dk.Addr:dk.Addr+uint64(dk.Len)])
			}
			s.rxCopied.Add(1)
		}
		for ; i != j; i++ {
			s.rxHeld = append(s.rxHeld, s.rx.desc(i).Addr)
		}
		done = i
		frames[n] = f
		n++
	}
	s.rx.cons = done
	s.rx.release()
	return n, nil
}

// join returns the multi-buffer frame of RX descriptors i..j-1 (total bytes)
// as one slice of the UMEM, or nil when its chunks are not each the one
// after the previous fragment's in the UMEM. The kernel takes a frame's
// chunks from the fill ring in order, and the fill ring gets them back in
// the order they were received, starting from ascending addresses, so a
// frame's chunks are adjacent but where that order wraps at the end of the
// receive chunks (or the kernel put a chunk back after a drop). Each
// fragment after the first is then moved down onto the end of the one
// before, over the kernel's headroom at the start of its chunk and the free
// end of the previous one: at PMTU 4096 in copy mode, 3840 bytes stay where
// the kernel wrote them and the last 300-odd move 256 bytes, instead of the
// whole frame being copied into a reassembly buffer. The chunks are the
// socket's until the next Receive, so rewriting them is safe.
func (s *Socket) join(i, j uint32, total int) []byte {
	first := s.rx.desc(i)
	mask := ^(s.chunk - 1)
	prev := first.Addr & mask
	for k := i + 1; k != j; k++ {
		c := s.rx.desc(k).Addr & mask
		if c != prev+s.chunk {
			return nil
		}
		prev = c
	}
	end := first.Addr + uint64(first.Len)
	for k := i + 1; k != j; k++ {
		d := s.rx.desc(k)
		if d.Addr != end { // the destination lies below: copy is memmove
			copy(s.umem[end:end+uint64(d.Len)], s.umem[d.Addr:d.Addr+uint64(d.Len)])
		}
		end += uint64(d.Len)
	}
	s.rxJoined.Add(1)
	return s.umem[first.Addr : first.Addr+uint64(total) : first.Addr+uint64(total)]
}

// recycleRx gives the chunks of the last batch back to the fill ring.
func (s *Socket) recycleRx() {
	if len(s.rxHeld) == 0 {
		return
	}
	free := s.fill.free(uint32(len(s.rxHeld)))
	k := min(int(free), len(s.rxHeld))
	for _, a := range s.rxHeld[:k] {
		*s.fill.addr(s.fill.prod) = a &^ (s.chunk - 1)
		s.fill.prod++
	}
	s.fill.submit()
	s.rxHeld = s.rxHeld[:copy(s.rxHeld, s.rxHeld[k:])]
	s.kickFill()
}

// kickFill wakes the driver when it sleeps waiting for fill-ring entries.
func (s *Socket) kickFill() {
	if s.wakeup && s.fill.needWakeup() {
		unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}
