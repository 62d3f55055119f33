// Command fakenodes creates and deletes the fake Nodes that kwok animates in the local
// stack (dev/up.sh). It talks to the API server directly and in parallel: a thousand Nodes
// take seconds, where one kubectl call per Node takes minutes.
//
//	fakenodes [--prefix P] [--label k=v ...] N    create Nodes P0 .. P(N-1), wait until Ready
//	fakenodes --delete [--prefix P]               delete every fake Node named P*
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/noderollout/noderollout/internal/bulk"
)

const (
	// kwokLabel and kwokSelector mark the Nodes that kwok manages (see dev/components.sh).
	kwokLabel    = "type"
	kwokValue    = "kwok"
	kwokSelector = kwokLabel + "=" + kwokValue
	fieldManager = "noderollout-fakenodes"
)

type options struct {
	kubeconfig string
	prefix     string
	labels     []string
	remove     bool
	workers    int
	wait       bool
	timeout    time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakenodes:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var o options
	fs := pflag.NewFlagSet("fakenodes", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the local stack")
	fs.StringVar(&o.prefix, "prefix", "kwok-node-", "Node name prefix")
	fs.StringArrayVar(&o.labels, "label", nil, "extra Node label k=v (repeatable), e.g. noderollout.dev/stuck=true")
	fs.BoolVar(&o.remove, "delete", false, "delete the fake Nodes whose name starts with --prefix")
	fs.IntVar(&o.workers, "parallel", 64, "requests in flight")
	fs.BoolVar(&o.wait, "wait", true, "wait until created Nodes are Ready, or deleted Nodes are gone")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.workers < 1 {
		return errors.New("--parallel must be at least 1")
	}

	cs, err := clientset(o.kubeconfig)
	if err != nil {
		return err
	}
	if o.remove {
		if fs.NArg() != 0 {
			return errors.New("--delete takes no node count")
		}
		return deleteNodes(ctx, cs, o)
	}
	if fs.NArg() != 1 {
		return errors.New("usage: fakenodes [--prefix P] [--label k=v ...] N")
	}
	n, err := strconv.Atoi(fs.Arg(0))
	if err != nil || n < 0 {
		return fmt.Errorf("node count %q: want a number >= 0", fs.Arg(0))
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return err
	}
	return createNodes(ctx, cs, o, n, labels)
}

func clientset(kubeconfig string) (*kubernetes.Clientset, error) {
	if kubeconfig == "" {
		return nil, errors.New("no kubeconfig: set --kubeconfig or KUBECONFIG (source dev/env)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	// The client-side limiter, not the API server, would otherwise be the bottleneck.
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.ContentType = runtime.ContentTypeProtobuf
	return kubernetes.NewForConfig(cfg)
}

func parseLabels(pairs []string) (map[string]string, error) {
	labels := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: want key=value", p)
		}
		labels[k] = v
	}
	return labels, nil
}

// fakeNode is a Node as kwok expects it: selected by label, marked fake, untainted.
// Its status is left to kwok's node stage (dev/kwok/node-ready.yaml).
func fakeNode(name string, extra map[string]string) *corev1.Node {
	labels := map[string]string{
		kwokLabel:                kwokValue,
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range extra {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
	}
}

func createNodes(ctx context.Context, cs kubernetes.Interface, o options, n int, extra map[string]string) error {
	start := time.Now()
	names := make([]string, n)
	for i := range names {
		names[i] = o.prefix + strconv.Itoa(i)
	}
	var existed atomic.Int64
	err := bulk.Parallel(ctx, o.workers, names, func(ctx context.Context, name string) error {
		_, err := cs.CoreV1().Nodes().Create(ctx, fakeNode(name, extra), metav1.CreateOptions{FieldManager: fieldManager})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// Reuse the Node, but with the labels asked for now (e.g. to make it stuck).
		existed.Add(1)
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": fakeNode(name, extra).Labels}})
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("created %d Nodes %s0..%s%d (%d existed) in %.1fs\n",
		n, o.prefix, o.prefix, n-1, existed.Load(), time.Since(start).Seconds())
	if !o.wait || n == 0 {
		return nil
	}
	want := make(map[string]bool, n)
	for _, name := range names {
		want[name] = true
	}
	err = waitFor(ctx, o.timeout, func(ctx context.Context) (bool, string, error) {
		ready := 0
		err := bulk.EachNode(ctx, cs, kwokSelector, func(node *corev1.Node) {
			if want[node.Name] && isReady(node) {
				ready++
			}
		})
		return ready == n, fmt.Sprintf("%d of %d Nodes Ready", ready, n), err
	})
	if err != nil {
		return err
	}
	fmt.Printf("%d Nodes Ready after %.1fs\n", n, time.Since(start).Seconds())
	return nil
}

func deleteNodes(ctx context.Context, cs kubernetes.Interface, o options) error {
	start := time.Now()
	var names []string
	err := bulk.EachNode(ctx, cs, kwokSelector, func(node *corev1.Node) {
		if strings.HasPrefix(node.Name, o.prefix) {
			names = append(names, node.Name)
		}
	})
	if err != nil {
		return err
	}
	err = bulk.Parallel(ctx, o.workers, names, func(ctx context.Context, name string) error {
		err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("deleted %d Nodes %s* in %.1fs\n", len(names), o.prefix, time.Since(start).Seconds())
	if !o.wait || len(names) == 0 {
		return nil
	}
	return waitFor(ctx, o.timeout, func(ctx context.Context) (bool, string, error) {
		left := 0
		err := bulk.EachNode(ctx, cs, kwokSelector, func(node *corev1.Node) {
			if strings.HasPrefix(node.Name, o.prefix) {
				left++
			}
		})
		return left == 0, fmt.Sprintf("%d Nodes %s* left", left, o.prefix), err
	})
}

func isReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitFor polls check until it reports done, failing after timeout with check's last word.
func waitFor(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		done, progress, err := check(ctx)
		switch {
		case done:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("gave up after %s: %s", timeout, progress)
		case err != nil:
			fmt.Fprintln(os.Stderr, "fakenodes: retrying:", err)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}
