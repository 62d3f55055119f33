package readyz

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAwaitReturnsOnceReadyzAnswersOK(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/readyz", r.URL.Path)
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	require.NoError(t, Await(context.Background(), addr, nil, time.Minute))
	require.EqualValues(t, 3, asked.Load(), "not ready twice, then ready")
}

func TestAwaitStopsWhenTheProcessExitsTheContextEndsOrTimeRunsOut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	exited := make(chan struct{})
	close(exited)
	require.ErrorIs(t, Await(context.Background(), addr, exited, time.Minute), ErrExited)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, Await(ctx, addr, nil, time.Minute), context.Canceled)

	err := Await(context.Background(), addr, nil, 300*time.Millisecond)
	require.ErrorContains(t, err, "not ready within 300ms")
}
