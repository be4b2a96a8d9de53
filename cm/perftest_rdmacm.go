package cm

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
)

// perftest's rdma_cm mode (-R), as perftest 6.06 speaks it and rdmacm_write_bw.pcap shows it:
// the client connects a control queue pair through the RDMA CM (the test's port, 18515), and
// every message the TCP exchange would carry goes as one RC SEND on it, each side keeping one
// receive posted (versions 16 bytes, system data 4 and 4, MTU 2, reports 8 each). The key
// message is then perftest's struct pingpong_dest itself, 56 bytes with its fields big-endian
// (MarshalCM). Before the key handshake come two handshakes of all-zero keys with the CM
// connection of the test queue pair between them (PerftestSetup.CMConnect); the handshakes
// after it are those of the TCP exchange; the close is the last handshake alone, no "done".

// PerftestCMKeyLen is sizeof(struct pingpong_dest): the key message of the rdma_cm mode.
const PerftestCMKeyLen = 56

// MarshalCM returns the rdma_cm mode's key message: lid, out_reads, qpn, psn, rkey (4 bytes
// each), 4 bytes of padding (perftest leaves them as its stack had them; zero here), vaddr (8),
// the GID (16), srqn and gid_index (4 each), all big-endian.
func (d PerftestDest) MarshalCM() ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return nil, fmt.Errorf("cm: perftest keys: QPN 0x%x or PSN 0x%x over 24 bits", d.QPN, d.PSN)
	}
	b := make([]byte, PerftestCMKeyLen)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(d.LID))
	be.PutUint32(b[4:], uint32(d.OutReads))
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	be.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	be.PutUint32(b[48:], d.SRQN)
	be.PutUint32(b[52:], d.GIDIndex)
	return b, nil
}

// UnmarshalPerftestDestCM parses the rdma_cm mode's 56-byte key message (the padding is
// ignored).
func UnmarshalPerftestDestCM(b []byte) (PerftestDest, error) {
	if len(b) != PerftestCMKeyLen {
		return PerftestDest{}, fmt.Errorf("cm: perftest keys: %w: %d bytes, want %d (rdma_cm mode)", ErrProtocol, len(b), PerftestCMKeyLen)
	}
	be := binary.BigEndian
	lid, out := be.Uint32(b[0:]), be.Uint32(b[4:])
	d := PerftestDest{LID: uint16(lid), OutReads: uint16(out), QPN: be.Uint32(b[8:]), PSN: be.Uint32(b[12:]),
		RKey: be.Uint32(b[16:]), VAddr: be.Uint64(b[24:]), SRQN: be.Uint32(b[48:]), GIDIndex: be.Uint32(b[52:])}
	copy(d.GID[:], b[32:48])
	if lid > 0xffff || out > 0xffff || d.QPN > 0xffffff || d.PSN > 0xffffff {
		return d, fmt.Errorf("cm: perftest keys: %w: LID 0x%x, out_reads 0x%x, QPN 0x%x or PSN 0x%x out of range", ErrProtocol, lid, out, d.QPN, d.PSN)
	}
	return d, nil
}

// PerftestMessages carries perftest's exchange as messages, one send per message: the rdma_cm
// mode's control queue pair. SendMsg returns once the message was delivered (its SEND
// completed); RecvMsg waits for the next message and copies it into b, returning its length.
// Both end with ctx.
type PerftestMessages interface {
	SendMsg(ctx context.Context, b []byte) error
	RecvMsg(ctx context.Context, b []byte) (int, error)
}

// NewPerftestCMConn runs perftest's steps over m, the control channel of its rdma_cm mode:
// the key messages are MarshalCM's, Setup connects the test queue pair with CMConnect between
// two handshakes of zero keys, Close runs the last handshake only (the caller disconnects).
func NewPerftestCMConn(m PerftestMessages, client bool) *PerftestConn {
	return &PerftestConn{msgs: m, Client: client}
}

// sendMsg and recvMsg are write and read over the messages of the rdma_cm mode.
func (c *PerftestConn) sendMsg(ctx context.Context, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	if err := c.msgs.SendMsg(ctx, b); err != nil {
		return ctxErr(ctx, fmt.Errorf("cm: perftest: send %d bytes: %w", len(b), err))
	}
	return nil
}

func (c *PerftestConn) recvMsg(ctx context.Context, n int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	b := make([]byte, max(n, PerftestCMKeyLen))
	got, err := c.msgs.RecvMsg(ctx, b)
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("cm: perftest: read %d bytes: %w", n, err))
	}
	if got != n {
		return nil, fmt.Errorf("cm: perftest: %w: a message of %d bytes where %d were due", ErrProtocol, got, n)
	}
	return b[:n], nil
}

func (c *PerftestConn) timeout() time.Duration {
	if c.Timeout == 0 {
		return 60 * time.Second
	}
	return c.Timeout
}

// marshalKeys is the key message of the connection's mode.
func (c *PerftestConn) marshalKeys(d PerftestDest) ([]byte, error) {
	if c.msgs != nil {
		return d.MarshalCM()
	}
	return d.Marshal()
}

func (c *PerftestConn) unmarshalKeys(b []byte) (PerftestDest, error) {
	if c.msgs != nil {
		return UnmarshalPerftestDestCM(b)
	}
	return UnmarshalPerftestDest(b)
}

// cmConnect runs the rdma_cm mode's steps before the key handshake: a handshake of zero
// keys, the CM connection of the test queue pair, another handshake of zero keys.
func (c *PerftestConn) cmConnect(ctx context.Context, connect func() error) error {
	if _, err := c.HandShake(ctx, PerftestDest{}); err != nil {
		return err
	}
	if connect != nil {
		if err := connect(); err != nil {
			return fmt.Errorf("cm: perftest: rdma_cm connection of the test queue pair: %w", err)
		}
	}
	_, err := c.HandShake(ctx, PerftestDest{})
	return err
}
