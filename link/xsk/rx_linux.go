package xsk

import (
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// Receive stores up to len(frames) received frames in frames and returns how
// many, without blocking. Frames alias the UMEM (or, for multi-buffer frames,
// a reassembly buffer) and stay valid until the next Receive call; Receive
// returns the previous batch's chunks to the fill ring first.
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
		// A multi-buffer frame: find its last descriptor, then copy.
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
			break // the rest of the frame is not in the ring yet
		}
		if sc == len(s.scratch) {
			break // out of reassembly buffers: the frame waits for the next call
		}
		var dst []byte
		if total <= len(s.scratch[sc]) {
			dst = s.scratch[sc][:total]
			sc++
		}
		off := 0
		for ; i != j; i++ {
			di := s.rx.desc(i)
			s.rxHeld = append(s.rxHeld, di.Addr)
			if dst != nil {
				off += copy(dst[off:], s.umem[di.Addr:di.Addr+uint64(di.Len)])
			}
		}
		done = i
		if dst == nil {
			s.rxErrors++
			continue
		}
		frames[n] = dst
		n++
	}
	s.rx.cons = done
	s.rx.release()
	return n, nil
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
