// Package bulk does many API-server calls at once for the tools that make and watch fleets of
// fake Nodes (dev/cmd/fakenodes, the bench): calls in parallel, lists a page at a time.
package bulk

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"
)

// Parallel runs fn for every item with at most workers calls in flight and returns the first
// error, prefixed with its item; the calls still queued are skipped, and the ones in flight
// see their context cancelled.
func Parallel[T any](ctx context.Context, workers int, items []T, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan T)
	var wg sync.WaitGroup
	for range min(workers, len(items)) {
		wg.Go(func() {
			for item := range work {
				if err := fn(ctx, item); err != nil {
					cancel(fmt.Errorf("%v: %w", item, err))
				}
			}
		})
	}
feed:
	for _, item := range items {
		select {
		case work <- item:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// EachNode calls fn for every Node the label selector matches, a page of 1000 at a time, so
// that a fleet of ten thousand is never held in one response.
func EachNode(ctx context.Context, kube kubernetes.Interface, selector string, fn func(*corev1.Node)) error {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return kube.CoreV1().Nodes().List(ctx, opts)
	})
	p.PageSize = 1000
	return p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(obj runtime.Object) error {
		fn(obj.(*corev1.Node))
		return nil
	})
}
