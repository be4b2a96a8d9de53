package cm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
)

// MaxHandshakes bounds the connections a Listener runs TLS, the hello and the authentication
// with at once; further connections wait in the kernel's backlog.
const MaxHandshakes = 64

// acceptor runs a Listener's handshakes in the background, each in its own goroutine, so that
// a client that connects and says nothing holds up only itself (for the Timeout), not the
// clients behind it.
type acceptor struct {
	once    sync.Once
	closing sync.Once
	results chan accepted
	done    chan struct{} // closed by Close
	ended   chan struct{} // closed when the accept loop ends (net.ErrClosed)
	endErr  error
	sem     chan struct{}
}

type accepted struct {
	c   *Conn
	err error
}

func (l *Listener) start() {
	l.acc.once.Do(func() {
		l.acc.results = make(chan accepted)
		if l.acc.done == nil {
			l.acc.done = make(chan struct{})
		}
		l.acc.ended = make(chan struct{})
		l.acc.sem = make(chan struct{}, MaxHandshakes)
		go l.loop()
	})
}

func (l *Listener) loop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-l.acc.done
		cancel()
	}()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.acc.endErr = fmt.Errorf("cm: accept: %w", err)
				close(l.acc.ended)
				return
			}
			l.deliver(accepted{err: fmt.Errorf("cm: accept: %w", err)})
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		select {
		case l.acc.sem <- struct{}{}:
		case <-l.acc.done:
			nc.Close()
			continue
		}
		go func() {
			defer func() { <-l.acc.sem }()
			c, err := l.handshake(ctx, nc)
			l.deliver(accepted{c, err})
		}()
	}
}

// deliver hands a result to Accept, or drops it once the listener is closed.
func (l *Listener) deliver(a accepted) {
	select {
	case l.acc.results <- a:
	case <-l.acc.done:
		if a.c != nil {
			a.c.Close()
		}
	}
}

// Close stops listening; a blocked Accept returns net.ErrClosed, and connections still in
// their handshake are closed.
func (l *Listener) Close() error {
	l.start()
	l.acc.closing.Do(func() { close(l.acc.done) })
	return l.ln.Close()
}

// Accept waits for a client that has passed TLS, the hello exchange and the authentication
// (run in the background for several clients at once, MaxHandshakes). A client that fails
// them gets an error (the connection is closed, the listener stays usable): callers usually log
// it and accept again. net.ErrClosed means the listener was closed.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	l.start()
	select {
	case a := <-l.acc.results:
		return a.c, a.err
	case <-l.acc.ended:
		return nil, l.acc.endErr
	case <-ctx.Done():
		return nil, fmt.Errorf("cm: accept: %w", ctx.Err())
	}
}

// handshake runs TLS (when configured), the hello and the authentication with a new client.
func (l *Listener) handshake(ctx context.Context, nc net.Conn) (*Conn, error) {
	if l.proxy != nil {
		kc, err := ktls.Server(ctx, nc, l.proxy)
		var plain *ktls.NotTLSError
		if errors.As(err, &plain) {
			return nil, l.refusePlain(ctx, plain.Conn)
		}
		if err != nil {
			return nil, fmt.Errorf("cm: %w", err)
		}
		nc = kc
	}
	if l.tcfg != nil {
		var plain bool
		if nc, plain = l.peekTLS(ctx, nc); plain {
			return nil, l.refusePlain(ctx, nc)
		}
		tc := tls.Server(nc, l.tcfg)
		hctx, cancel := context.WithTimeout(ctx, l.timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("cm: tls with %v: %w", nc.RemoteAddr(), err)
		}
		nc = tc
	}
	conn := newConn(nc, l.timeout)
	if err := conn.serverHello(ctx, l); err != nil {
		nc.Close()
		return nil, fmt.Errorf("cm: client %v: %w", nc.RemoteAddr(), err)
	}
	return conn, nil
}
