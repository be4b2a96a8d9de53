package tlsproxy

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"

	"github.com/xdproce/xdproce/cm/ktls"
)

// Key log labels of the TLS 1.3 application traffic secrets (NSS key log format, as
// crypto/tls's Config.KeyLogWriter writes them).
const (
	labelClientTraffic = "CLIENT_TRAFFIC_SECRET_0"
	labelServerTraffic = "SERVER_TRAFFIC_SECRET_0"
)

// keyLog collects one connection's secrets from its KeyLogWriter lines
// ("LABEL client_random secret", hex).
type keyLog struct {
	mu      sync.Mutex
	secrets map[string][]byte
}

func (k *keyLog) Write(b []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) != 3 {
			continue
		}
		s, err := hex.DecodeString(string(f[2]))
		if err != nil {
			return 0, fmt.Errorf("tlsproxy: key log line for %s: %w", f[0], err)
		}
		if k.secrets == nil {
			k.secrets = make(map[string][]byte)
		}
		k.secrets[string(f[0])] = s
	}
	return len(b), nil
}

func (k *keyLog) secret(label string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.secrets[label]
	if s == nil {
		return nil, fmt.Errorf("tlsproxy: the TLS stack logged no %s", label)
	}
	return s, nil
}

// suiteHash is the HKDF hash of a suite the endpoint has.
func suiteHash(suite uint16) (func() hash.Hash, error) {
	switch suite {
	case ktls.TLS_AES_128_GCM_SHA256:
		return sha256.New, nil
	case ktls.TLS_AES_256_GCM_SHA384:
		return sha512.New384, nil
	}
	return nil, fmt.Errorf("tlsproxy: cipher suite %s: the endpoint has AES-128-GCM and AES-256-GCM only", ktls.SuiteName(suite))
}

// expandLabel is HKDF-Expand-Label(secret, label, "", length) of RFC 8446 §7.1: the info is
// the length (u16), "tls13 "+label with a one-byte length, and an empty context.
func expandLabel(h func() hash.Hash, secret []byte, label string, length int) ([]byte, error) {
	full := "tls13 " + label
	info := binary.BigEndian.AppendUint16(nil, uint16(length))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0)
	return hkdf.Expand(h, secret, string(info), length)
}

// trafficKeys derives a direction's key and IV from its traffic secret (RFC 8446 §7.3).
func trafficKeys(suite uint16, secret []byte, seq uint64) (ktls.Direction, error) {
	h, err := suiteHash(suite)
	if err != nil {
		return ktls.Direction{}, err
	}
	key, err := expandLabel(h, secret, "key", ktls.KeyLen(suite))
	if err != nil {
		return ktls.Direction{}, err
	}
	iv, err := expandLabel(h, secret, "iv", ktls.IVLen)
	if err != nil {
		return ktls.Direction{}, err
	}
	return ktls.Direction{Key: key, IV: iv, Seq: seq}, nil
}
