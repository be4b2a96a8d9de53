package shm

import "golang.org/x/sys/unix"

// Quiet sending, for a sender that queues several frames to one peer in a
// round and signals it once at the end (the xdproce daemon's placement
// messages): the peer then wakes once for all of them, not for the first
// while the others are still being made.

// SendCopyQuiet is SendCopy without signalling the peer: the frame waits in
// the ring until the peer looks (it is awake, something else wakes it, or
// Kick). crowded reports a ring more than half full (or without a free
// buffer): the caller should Kick soon.
func (l *Link) SendCopyQuiet(frame []byte) (queued, crowded bool, err error) {
	return l.sendCopy(frame, nil, false)
}

// Kick signals the peer if it sleeps waiting for frames.
func (l *Link) Kick() {
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closing.Load() || l.peerGone.Load() || !l.tx.wantsWake() {
		return
	}
	unix.Write(l.txWake, one[:])
	l.wakeups.Add(1)
}
