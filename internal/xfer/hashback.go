package xfer

import (
	"fmt"
	"hash"
	"io"
	"sync/atomic"
)

// hashBackBuf is the size of a backHash's read buffer.
const hashBackBuf = 1 << 20

// A backHash hashes a file being received from its start, on a goroutine of
// its own, by reading back what was written to it: the receiver writes a
// slot and hands it back to the sender at once, and the SHA-256 (the
// slowest step of a receive, ~1.5 GB/s a core) runs beside the transfer
// instead of holding the slot. written announces each new end of the bytes
// written; wait returns once every announced byte is hashed.
type backHash struct {
	r    io.ReaderAt
	h    hash.Hash
	ends chan int64
	done chan struct{}
	quit atomic.Bool // stop: what is left need not be hashed
	shut bool        // wait closed ends (written and wait run on one goroutine)
	err  error       // the first read failure (the goroutine's until done closes)
}

// newBackHash starts hashing r's bytes into h as written announces them.
// The caller must call wait (also on failure paths) to end the goroutine.
func newBackHash(r io.ReaderAt, h hash.Hash) *backHash {
	b := &backHash{r: r, h: h, ends: make(chan int64, 64), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *backHash) run() {
	defer close(b.done)
	buf := make([]byte, hashBackBuf)
	var off int64
	for end := range b.ends {
		for off < end && b.err == nil && !b.quit.Load() {
			n, err := b.r.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			b.h.Write(buf[:n])
			off += int64(n)
			if err != nil && off < end {
				b.err = fmt.Errorf("read back at %d for the checksum: %w", off, err)
			}
		}
	}
}

// written announces that the bytes before end are in the file. It blocks
// while the hasher is 64 announcements behind; after wait it does nothing.
func (b *backHash) written(end int64) {
	if !b.shut {
		b.ends <- end
	}
}

// wait ends the hashing once every announced byte is hashed and returns
// the first read failure. It may be called more than once.
func (b *backHash) wait() error {
	if !b.shut {
		b.shut = true
		close(b.ends)
	}
	<-b.done
	return b.err
}

// stop ends the hashing without waiting for the bytes not yet hashed (the
// transfer failed: h is not used); after wait it does nothing.
func (b *backHash) stop() {
	b.quit.Store(true)
	b.wait()
}
