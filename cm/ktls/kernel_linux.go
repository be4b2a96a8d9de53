package ktls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// From linux/tls.h (golang.org/x/sys/unix has SOL_TLS and TCP_ULP but not these).
const (
	tlsTX               = 1
	tlsRX               = 2
	tlsSetRecordType    = 1
	tlsGetRecordType    = 2
	tlsCipherAESGCM128  = 51
	tlsCipherAESGCM256  = 52
	kernelTLS13Version  = 0x0304
	kernelSaltLen       = 4
	kernelIVLen         = 8
	kernelSeqLen        = 8
	kernelCryptoInfoLen = 4 // struct tls_crypto_info: version u16, cipher_type u16
)

// cryptoInfo lays out struct tls12_crypto_info_aes_gcm_{128,256}: the common header (native
// byte order), then iv[8], key[16 or 32], salt[4], rec_seq[8]. For TLS 1.3 the salt is the
// first 4 bytes of the 12-byte IV and iv the other 8; rec_seq is the sequence number,
// big-endian.
func cryptoInfo(suite uint16, d Direction) []byte {
	cipher := uint16(tlsCipherAESGCM128)
	if suite == TLS_AES_256_GCM_SHA384 {
		cipher = tlsCipherAESGCM256
	}
	b := make([]byte, 0, kernelCryptoInfoLen+kernelIVLen+len(d.Key)+kernelSaltLen+kernelSeqLen)
	b = binary.NativeEndian.AppendUint16(b, kernelTLS13Version)
	b = binary.NativeEndian.AppendUint16(b, cipher)
	b = append(b, d.IV[kernelSaltLen:]...)
	b = append(b, d.Key...)
	b = append(b, d.IV[:kernelSaltLen]...)
	return binary.BigEndian.AppendUint64(b, d.Seq)
}

// installKernel hands the session to the kernel: TCP_ULP "tls", then TLS_TX and TLS_RX.
// Without the tls module the first step fails and the error wraps ErrNoKernelTLS.
func installKernel(nc net.Conn, p *Params) (recordLayer, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a socket", ErrNoKernelTLS, nc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoKernelTLS, err)
	}
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		if serr = setULP(fd); serr != nil {
			return
		}
		if err := unix.SetsockoptString(int(fd), unix.SOL_TLS, tlsTX, string(cryptoInfo(p.Suite, p.Tx))); err != nil {
			serr = fmt.Errorf("ktls: setsockopt TLS_TX (%s): %w", SuiteName(p.Suite), err)
			return
		}
		if err := unix.SetsockoptString(int(fd), unix.SOL_TLS, tlsRX, string(cryptoInfo(p.Suite, p.Rx))); err != nil {
			serr = fmt.Errorf("ktls: setsockopt TLS_RX (%s) after TLS_TX took: %w", SuiteName(p.Suite), err)
		}
	})
	if cerr != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoKernelTLS, cerr)
	}
	if serr != nil {
		return nil, serr
	}
	return &kernelLayer{nc: nc, rc: rc, buf: make([]byte, maxPlaintext), oob: make([]byte, unix.CmsgSpace(1))}, nil
}

// kernelLayer reads and writes through a socket whose records the kernel encrypts and
// decrypts: data with read and write, other record types with the record-type control
// message.
type kernelLayer struct {
	nc  net.Conn
	rc  syscall.RawConn
	buf []byte
	oob []byte
}

func (k *kernelLayer) readRecord() (byte, []byte, error) {
	var n, oobn int
	var rerr error
	err := k.rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), k.buf, k.oob, 0)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	switch {
	case errors.Is(err, unix.EBADMSG):
		return 0, nil, &AlertError{Desc: alertBadRecordMAC, Why: "a record failed authentication (kernel TLS)"}
	case errors.Is(err, unix.EMSGSIZE):
		return 0, nil, &AlertError{Desc: alertRecordOverflow, Why: "an oversize record (kernel TLS)"}
	case err != nil:
		return 0, nil, fmt.Errorf("ktls: kernel TLS read: %w", err)
	case n == 0 && oobn == 0:
		return 0, nil, truncated(io.EOF)
	}
	typ := typeApplicationData
	msgs, err := unix.ParseSocketControlMessage(k.oob[:oobn])
	if err != nil {
		return 0, nil, fmt.Errorf("ktls: kernel TLS control message: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_TLS && m.Header.Type == tlsGetRecordType && len(m.Data) > 0 {
			typ = m.Data[0]
		}
	}
	return typ, k.buf[:n], nil
}

func (k *kernelLayer) writeRecord(typ byte, content []byte) error {
	if typ == typeApplicationData {
		_, err := k.nc.Write(content)
		return err
	}
	oob := make([]byte, unix.CmsgSpace(1))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_TLS, tlsSetRecordType
	h.SetLen(unix.CmsgLen(1))
	oob[unix.CmsgLen(0)] = typ
	var serr error
	err := k.rc.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgN(int(fd), content, oob, nil, 0)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	return err
}

// KernelInstalled reports whether the socket under c has kernel TLS transmit state
// (getsockopt SOL_TLS TLS_TX succeeds).
func KernelInstalled(c *Conn) bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var gerr error = ErrNoKernelTLS
	rc.Control(func(fd uintptr) {
		_, gerr = unix.GetsockoptString(int(fd), unix.SOL_TLS, tlsTX)
	})
	return gerr == nil
}

// ProbeKernel reports whether kernel TLS takes sessions here, by setting TCP_ULP "tls" on a
// loopback TCP connection: nil means it does; otherwise the error says why not.
func ProbeKernel() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("%w: probe: %v", ErrNoKernelTLS, err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return fmt.Errorf("%w: probe: %v", ErrNoKernelTLS, err)
	}
	defer c.Close()
	if s, err := ln.Accept(); err == nil {
		s.Close()
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: probe: %v", ErrNoKernelTLS, err)
	}
	var serr error
	rc.Control(func(fd uintptr) { serr = setULP(fd) })
	return serr
}

// setULP attaches the kernel's tls upper-layer protocol to a TCP socket.
func setULP(fd uintptr) error {
	if err := unix.SetsockoptString(int(fd), unix.SOL_TCP, unix.TCP_ULP, "tls"); err != nil {
		return fmt.Errorf("%w: setsockopt TCP_ULP tls: %v (is the tls module loaded? modprobe tls)", ErrNoKernelTLS, err)
	}
	return nil
}
