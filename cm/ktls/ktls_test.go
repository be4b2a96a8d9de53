package ktls

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The endpoint must not link crypto/tls: the handshake's cryptography lives in the proxy.
func TestNoCryptoTLS(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		if d == "crypto/tls" {
			t.Fatal("cm/ktls links crypto/tls")
		}
	}
}

// pair returns an endpoint Conn (user-space layer) and the peer's record layer over TCP
// loopback, with p's keys (the peer's directions swapped).
func pair(t *testing.T, suite uint16, txSeq uint64) (*Conn, *userLayer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	kl := KeyLen(suite)
	p := &Params{Version: VersionTLS13, Suite: suite,
		Rx: Direction{Key: bytes.Repeat([]byte{1}, kl), IV: bytes.Repeat([]byte{2}, IVLen)},
		Tx: Direction{Key: bytes.Repeat([]byte{3}, kl), IV: bytes.Repeat([]byte{4}, IVLen), Seq: txSeq}}
	q, err := UnmarshalParams(p.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	c, err := newConn(a, q, KernelOff, false)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := newUserLayer(b, &Params{Version: VersionTLS13, Suite: suite, Rx: p.Tx, Tx: p.Rx})
	if err != nil {
		t.Fatal(err)
	}
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { a.Close(); b.Close() })
	return c, peer
}

func TestRecordLayerBothSuites(t *testing.T) {
	for _, suite := range []uint16{TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384} {
		t.Run(SuiteName(suite), func(t *testing.T) {
			c, peer := pair(t, suite, 0)
			msg := bytes.Repeat([]byte("xdproce"), 5000) // 35000 bytes: three records
			go c.Write(msg)
			var got []byte
			for len(got) < len(msg) {
				typ, content, err := peer.readRecord()
				if err != nil || typ != typeApplicationData || len(content) > maxPlaintext {
					t.Fatalf("peer read: type %d, %d bytes, %v", typ, len(content), err)
				}
				got = append(got, content...)
			}
			if !bytes.Equal(got, msg) {
				t.Fatal("peer got other bytes")
			}
			// The peer's data, an empty record, then close_notify: data, then io.EOF.
			peer.writeRecord(typeApplicationData, []byte("hello"))
			peer.writeRecord(typeApplicationData, nil)
			peer.writeRecord(typeAlert, []byte{1, alertCloseNotify})
			b, err := io.ReadAll(c)
			if err != nil || string(b) != "hello" {
				t.Fatalf("endpoint read %q, %v", b, err)
			}
		})
	}
}

// expectAlert: the endpoint's Read fails with want and the peer receives that alert.
func expectAlert(t *testing.T, c *Conn, peer *userLayer, want byte, text string) {
	t.Helper()
	_, err := c.Read(make([]byte, 10))
	var ae *AlertError
	if !errors.As(err, &ae) || ae.Desc != want || ae.Remote || !strings.Contains(err.Error(), text) {
		t.Fatalf("endpoint read: %v, want alert %d (%q)", err, want, text)
	}
	typ, content, err := peer.readRecord()
	if err != nil || typ != typeAlert || !bytes.Equal(content, []byte{2, want}) {
		t.Fatalf("peer got type %d % x, %v; want alert %d", typ, content, err, want)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("Write after a fatal alert succeeded")
	}
}

func TestKeyUpdateClosesWithAlert(t *testing.T) {
	c, peer := pair(t, TLS_AES_128_GCM_SHA256, 0)
	peer.writeRecord(typeHandshake, []byte{24, 0, 0, 1, 0}) // KeyUpdate(update_not_requested)
	expectAlert(t, c, peer, alertUnexpectedMessage, "KeyUpdate")
}

func TestBadRecords(t *testing.T) {
	t.Run("tampered", func(t *testing.T) {
		c, peer := pair(t, TLS_AES_128_GCM_SHA256, 0)
		n := copy(peer.wbuf[headerLen:], "data")
		peer.wbuf[headerLen+n] = typeApplicationData
		rec, _ := peer.out.seal(peer.wbuf, n+1)
		rec[len(rec)-1] ^= 1
		peer.nc.Write(rec)
		expectAlert(t, c, peer, alertBadRecordMAC, "authentication")
	})
	t.Run("oversize", func(t *testing.T) {
		c, peer := pair(t, TLS_AES_128_GCM_SHA256, 0)
		peer.nc.Write([]byte{typeApplicationData, 3, 3, (maxCiphertext + 1) >> 8, (maxCiphertext + 1) & 0xff})
		expectAlert(t, c, peer, alertRecordOverflow, "16641 bytes")
	})
	t.Run("plaintext-after-handshake", func(t *testing.T) {
		c, peer := pair(t, TLS_AES_128_GCM_SHA256, 0)
		peer.nc.Write([]byte{typeChangeCipherSpec, 3, 3, 0, 1, 1})
		expectAlert(t, c, peer, alertUnexpectedMessage, "unprotected")
	})
	t.Run("peer-alert", func(t *testing.T) {
		c, peer := pair(t, TLS_AES_128_GCM_SHA256, 0)
		peer.writeRecord(typeAlert, []byte{2, 40})
		_, err := c.Read(make([]byte, 1))
		var ae *AlertError
		if !errors.As(err, &ae) || !ae.Remote || ae.Desc != 40 {
			t.Fatalf("read: %v, want the peer's alert 40", err)
		}
	})
	t.Run("truncation", func(t *testing.T) {
		c, peer := pair(t, TLS_AES_128_GCM_SHA256, 0)
		peer.nc.Close()
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("read: %v, want io.ErrUnexpectedEOF (no close_notify)", err)
		}
	})
}

func TestSequenceNumberExhausted(t *testing.T) {
	c, _ := pair(t, TLS_AES_256_GCM_SHA384, math.MaxUint64)
	if _, err := c.Write([]byte("x")); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("write at the last sequence number: %v", err)
	}
}

func TestUnmarshalParamsRefuses(t *testing.T) {
	good := (&Params{Version: VersionTLS13, Suite: TLS_AES_128_GCM_SHA256,
		Rx: Direction{Key: make([]byte, 16), IV: make([]byte, 12)}, Tx: Direction{Key: make([]byte, 16), IV: make([]byte, 12)}}).Marshal()
	if _, err := UnmarshalParams(good); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"tls12":    append([]byte{3, 3}, good[2:]...),
		"chacha":   append([]byte{3, 4, 0x13, 0x03}, good[4:]...),
		"short":    good[:len(good)-1],
		"trailing": append(bytes.Clone(good), 0),
		"empty":    nil,
	} {
		if _, err := UnmarshalParams(b); !errors.Is(err, ErrParams) {
			t.Errorf("%s: %v, want ErrParams", name, err)
		}
	}
}

// A client skips the server's NewSessionTicket; a server refuses one.
func TestNewSessionTicket(t *testing.T) {
	ticket := []byte{msgNewSessionTicket, 0, 0, 3, 1, 2, 3}
	c, peer := pair(t, TLS_AES_128_GCM_SHA256, 0)
	c.client = true
	peer.writeRecord(typeHandshake, append(bytes.Clone(ticket), ticket...)) // two in one record
	peer.writeRecord(typeApplicationData, []byte("after"))
	b := make([]byte, 5)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "after" {
		t.Fatalf("client read %q, %v", b, err)
	}
	c, peer = pair(t, TLS_AES_128_GCM_SHA256, 0)
	peer.writeRecord(typeHandshake, ticket)
	expectAlert(t, c, peer, alertUnexpectedMessage, "handshake message 4")
}
