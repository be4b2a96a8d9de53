// Package gateway is `xdproce gateway`: an HTTP front for an `xdproce
// serve` node. A client's PUT /NAME stores NAME in the node's directory and
// GET /NAME reads it (with a single byte range when the request has a Range
// header); between the gateway and the node the content moves by RDMA
// (package internal/xfer: RDMA WRITE for PUT, RDMA READ for GET, on an RC
// queue pair of the gateway's device) while the control messages travel on
// the node's TCP control connection, one connection per HTTP request,
// authenticated as `xdproce send` and `get` authenticate.
//
// The gateway streams: a PUT's body goes from the HTTP connection into the
// staging slots and on to the node as it arrives, a GET's content from the
// slots to the HTTP response; a slot is refilled only once its content has
// left, so the gateway holds at most the staging buffer (Options.SlotSize ×
// Options.Slots, 16 MiB by default) and, for a GET, one slot more per
// request, whatever the file's size. MaxConns bounds the requests served at
// once.
//
// HTTP clients are not authenticated: whoever reaches the listener can read
// and write the node's directory with the gateway's credentials. `xdproce
// gateway` listens on loopback unless told otherwise.
package gateway
