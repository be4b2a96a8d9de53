package shm

import "golang.org/x/sys/unix"

// Quiet sending, for a sender that queues several frames to one peer in a
// round and signals it once at the end (the xdproce daemon's placement
// messages, and the frames it delivers in one batch): the peer then wakes
// once for all of them, not for the first while the others are still being
// made.

// SendCopyQuiet is SendCopy (hdr, when not nil, over the frame's first
// bytes) without signalling the peer: the frame waits in the ring until the
// peer looks (it is awake, something else wakes it, or Kick). crowded
// reports a ring more than half full (or without a free buffer): the caller
// should Kick soon.
func (l *Link) SendCopyQuiet(frame, hdr []byte) (queued, crowded bool, err error) {
	return l.sendCopy(frame, hdr, false)
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

// PeerSleeps reports whether the peer said it sleeps waiting for frames
// (its need-wakeup flag is up: the next Kick or signalling send wakes it).
func (l *Link) PeerSleeps() bool {
	l.life.RLock()
	defer l.life.RUnlock()
	return !l.closing.Load() && l.tx.need.Load() != 0
}
