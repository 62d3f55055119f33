package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/noderollout/noderollout/internal/bulk"
)

// Labels on the bench's Nodes: one marks every bench Node (stale ones are removed at start),
// the other selects the Nodes of one size of one run, which both systems roll out to.
const (
	labelBench   = "bench.noderollout.dev/bench"
	labelFleet   = "bench.noderollout.dev/fleet"
	labelFail    = "bench.noderollout.dev/fail"
	failSuffix   = "-fail"
	fleetWorkers = 64
)

// fleet is one size's fake Nodes; both systems run on the same Nodes, one after the other.
type fleet struct {
	id    string // label value of labelFleet
	nodes []string
	fail  []string // the deterministic few whose Pods fail
}

func (f *fleet) selector() string { return labelFleet + "=" + f.id }

// newFleetSpec names n Nodes; every failEvery-th Node (offset to the middle of each stride)
// gets a failing Pod: its name ends in failSuffix, which dev/kwok/pod-run.yaml fails, and it
// carries labelFail, so the Job template is the same at every size. Names are zero-padded so that name order, the order noderollout walks
// them, is creation order.
func newFleetSpec(run string, n, failPercent int) *fleet {
	f := &fleet{id: fmt.Sprintf("%s-%d", run, n)}
	failEvery := 0
	if failPercent > 0 {
		failEvery = max(1, 100/failPercent)
	}
	for i := range n {
		name := fmt.Sprintf("bn-%s-%05d", run, i)
		if failEvery > 0 && i%failEvery == failEvery/2 {
			name += failSuffix
			f.fail = append(f.fail, name)
		}
		f.nodes = append(f.nodes, name)
	}
	return f
}

// create makes the Nodes in parallel and waits until kwok has made every one Ready.
func (f *fleet) create(ctx context.Context, kube kubernetes.Interface, logf func(string, ...any)) error {
	start := time.Now()
	err := bulk.Parallel(ctx, fleetWorkers, f.nodes, func(ctx context.Context, name string) error {
		labels := map[string]string{
			"type": "kwok", labelBench: "true", labelFleet: f.id,
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}
		if strings.HasSuffix(name, failSuffix) {
			labels[labelFail] = "true"
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		}}
		_, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{FieldManager: "noderollout-bench"})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("creating %d nodes: %w", len(f.nodes), err)
	}
	logf("created %d nodes in %.1fs; waiting until Ready", len(f.nodes), time.Since(start).Seconds())
	return poll(ctx, 10*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string, error) {
		ready := 0
		err := bulk.EachNode(ctx, kube, f.selector(), func(n *corev1.Node) {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		})
		return ready == len(f.nodes), fmt.Sprintf("%d of %d nodes Ready", ready, len(f.nodes)), err
	})
}

// deleteNodes removes every Node matching selector, in parallel, and waits until they are gone.
func deleteNodes(ctx context.Context, kube kubernetes.Interface, selector string, logf func(string, ...any)) error {
	var names []string
	if err := bulk.EachNode(ctx, kube, selector, func(n *corev1.Node) { names = append(names, n.Name) }); err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	start := time.Now()
	err := bulk.Parallel(ctx, fleetWorkers, names, func(ctx context.Context, name string) error {
		err := kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting nodes %s: %w", selector, err)
	}
	err = poll(ctx, 5*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string, error) {
		left := 0
		err := bulk.EachNode(ctx, kube, selector, func(*corev1.Node) { left++ })
		return left == 0, fmt.Sprintf("%d nodes left", left), err
	})
	logf("deleted %d nodes (%s) in %.1fs", len(names), selector, time.Since(start).Seconds())
	return err
}

// createNamespace makes a namespace and waits for its default ServiceAccount, without which
// the Job controller's Pods are refused.
func createNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelBench: "true"}}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return poll(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, string, error) {
		_, err := kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, "default ServiceAccount in " + name, nil
	})
}

// waitNoPods waits until the namespace holds no Jobs and no Pods, so that the next system
// does not share the control plane with the previous one's garbage collection.
func waitNoPods(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	return poll(ctx, 5*time.Minute, time.Second, func(ctx context.Context) (bool, string, error) {
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, "", err
		}
		jobs, err := kube.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, "", err
		}
		left := func(n int, rest *int64) int64 {
			if rest != nil {
				return int64(n) + *rest
			}
			return int64(n)
		}
		return len(pods.Items) == 0 && len(jobs.Items) == 0,
			fmt.Sprintf("%d Pods and %d Jobs left in %s", left(len(pods.Items), pods.RemainingItemCount),
				left(len(jobs.Items), jobs.RemainingItemCount), namespace), nil
	})
}

// deleteNamespaces removes the namespaces matching opts, with their Jobs, and waits until
// they are gone.
func deleteNamespaces(ctx context.Context, kube kubernetes.Interface, opts metav1.ListOptions) error {
	list, err := kube.CoreV1().Namespaces().List(ctx, opts)
	if err != nil {
		return err
	}
	bg := metav1.DeletePropagationBackground
	for _, ns := range list.Items {
		releaseJobs(ctx, kube, ns.Name)
		_ = kube.BatchV1().Jobs(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
		if err := kube.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return poll(ctx, 5*time.Minute, time.Second, func(ctx context.Context) (bool, string, error) {
		list, err := kube.CoreV1().Namespaces().List(ctx, opts)
		if err != nil {
			return false, "", err
		}
		return len(list.Items) == 0, fmt.Sprintf("%d bench namespaces left", len(list.Items)), nil
	})
}

// releaseJobs drops the finalizers of the namespace's Jobs. A noderollout worker stopped in
// the middle of a run (an interrupted bench) leaves its Jobs with the outcome finalizer that
// only a worker removes, and the namespace would never go. Failures are left to the wait.
func releaseJobs(ctx context.Context, kube kubernetes.Interface, namespace string) {
	jobs, err := kube.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, j := range jobs.Items {
		if len(j.Finalizers) > 0 {
			_, _ = kube.BatchV1().Jobs(namespace).Patch(ctx, j.Name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	}
}

// jobTemplate is the Job every system runs on every node: kwok keeps its Pod Running for
// runSeconds, then ends it, failing it on the Nodes named with failSuffix (dev/kwok/pod-run.yaml).
func jobTemplate(runSeconds float64) string {
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  labels:
    app: noderollout-bench
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        noderollout.dev/run-seconds: "%g"
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "echo rolling out on {{node}}"]
`, runSeconds)
}

// poll calls check until it reports done, failing after timeout with check's last word.
func poll(ctx context.Context, timeout, every time.Duration, check func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		done, progress, err := check(ctx)
		if done && err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				progress += ": " + err.Error()
			}
			return fmt.Errorf("gave up after %s: %s", timeout, progress)
		case <-time.After(every):
		}
	}
}
