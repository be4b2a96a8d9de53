// Package xfer moves files between two xdproce processes over RoCEv2: the
// data by RDMA WRITE WITH IMMEDIATE into an lmrm pool (Send and Get; RDMA
// WRITE or READ with an older peer) on one RC queue pair, the
// coordination over a TCP control connection (package cm's: its hello
// authenticates the client before any request is read).
//
// The control connection carries length-prefixed JSON messages (a 4-byte
// big-endian length, then one object). The client opens with a request
// naming the file and its queue pair (QPN, first PSN, GID, path MTU); the
// server answers with its own queue pair and its limits, Slots slots of
// SlotSize bytes. An end message with the SHA-256 of the whole content
// closes the transfer, and the receiving side answers ok only when its own
// SHA-256 agrees.
//
// Between two ends that announce cm.CapLMRM (put_lmrm, get_lmrm: lmrm.go)
// nothing else goes by TCP: the side with the content is the requester of
// an lmrm pool on the RC queue pair, the other its provider. One LMRM_ALLOC
// asks for the slots, each chunk goes as one RDMA WRITE WITH IMMEDIATE (the
// immediate names pool and slot) into the next free slot, the receiver
// appends it at its running offset (RC keeps the order) and the provider
// gives the slots back in batches of LMRM_RELEASE. For get the client is
// the provider and says ready once its queue pair listens.
//
// With an older peer (no cm.CapLMRM) both ends log one line and use the
// slot protocol (put, get), which also carries --mode ooo: the server
// offers a registered staging buffer (address and rkey) and each slot goes
// round by TCP. For put the client RDMA-WRITEs a chunk into a free slot
// and, once the write has completed, sends a data message; the server
// appends the slot to the file and sends free. For get the server loads a
// chunk into a slot and sends a data message; the client RDMA-READs it and
// frees the slot.
//
// A get may ask for a span of the file (span.go, cm.CapRange), and
// GetStream writes what it fetches to an io.Writer instead of a file
// (stream.go; `xdproce gateway` uses it).
//
// With Options.Enlarge, Send and Get move the content through an enlargement
// channel (package enlarge) over the queue pair instead: the request
// (put_enlarge or get_enlarge) and the answer carry the channel's
// configuration and both ends' Endpoints, the content goes (from the client
// for put, from the server for get) as channel messages sized so that the
// sending direction is promoted one step of the ladder at a time (each
// promotion an ENLARGE_REQ and an ENLARGE_ACK on the wire), and the end
// message and verdict are as above. Servers accept every kind of request,
// and refuse a channel whose buffers would exceed their staging limit
// (Options.SlotSize × Options.Slots). See enlarge.go.
//
// The server opens every name beneath its directory's os.Root (store.go):
// symbolic links are followed while they stay inside and refused when they
// lead out; names with directories, a leading dot or control characters are
// refused; an existing file is replaced only when the server allows it
// (Server.Overwrite) and the client asks (Options.Force); a put larger than
// the free space of the directory's file system is refused before its
// accept. Any refusal goes to the client as an error message with the
// server's reason, which ends the client's transfer at once.
//
// The receiving side writes to a temporary file in the destination directory
// and renames it to the final name only when the content is complete and its
// checksum verified; on any failure (the peer going away, a checksum
// mismatch, cancellation) it removes the temporary file, so a partial file
// never appears under the final name. The temporary file is named
// .NAME.xdproce-PID-START-RANDOM.part after the receiving process (PID and
// start time); a receiver that is killed leaves it behind, and RemoveStale
// (run by `xdproce serve` at start-up and by `xdproce get` in its target
// directory) removes those whose process is gone.
package xfer
