package ktls

import "errors"

// ErrNoKernelTLS reports that kernel TLS cannot take a session here (no tls module, not
// Linux, not a TCP socket); KernelAuto then uses the user-space record layer.
var ErrNoKernelTLS = errors.New("ktls: kernel TLS unavailable")
