// Package readyz waits for a local process (a worker started by the bench or the e2e suite)
// to answer GET /readyz.
package readyz

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrExited is Await's error when the process exited before it was ready.
var ErrExited = errors.New("exited before it was ready")

// Await polls http://addr/readyz every 100 ms until it answers 200 OK. It stops early with
// ErrExited once exited is closed, with ctx's error once ctx ends, and with an error of its
// own after within.
func Await(ctx context.Context, addr string, exited <-chan struct{}, within time.Duration) error {
	return Until(ctx, exited, within, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Until asks ready every 100 ms until it holds, with Await's early stops: ErrExited once exited
// is closed, ctx's error once ctx ends, an error of its own after within. For a process whose
// readiness is not a /readyz endpoint.
func Until(ctx context.Context, exited <-chan struct{}, within time.Duration, ready func() bool) error {
	deadline := time.Now().Add(within)
	for {
		if ready() {
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s", within)
		}
	}
}
