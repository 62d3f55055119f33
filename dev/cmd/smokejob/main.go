// Command smokejob checks that the local stack (dev/up.sh) runs Jobs the way noderollout
// needs: on fake Nodes, in a namespace of its own that it deletes at the end, it expects
//
//   - a Job pinned to a Node with run-seconds 2 to become Complete after about 2 s,
//   - a Job with exit-code 3 and backoffLimit 0 to become FailureTarget, then Failed,
//     its Pod's container terminated with exit code 3,
//   - a Job whose Node is listed in fail-nodes to fail with fail-exit-code 5, while the
//     Job that completes lists only other Nodes,
//   - a Job on a stuck Node to stay active with its Pod Pending,
//   - deleting a running Job, and the stuck one, with Background propagation to remove
//     their Pods, and deleting the namespace to finish.
//
// It exits non-zero at the first expectation not met.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Pod annotations read by the kwok stages in dev/kwok/pod-run.yaml.
const (
	annotationRunSeconds = "noderollout.dev/run-seconds"
	annotationExitCode   = "noderollout.dev/exit-code"
	annotationFailNodes  = "noderollout.dev/fail-nodes"
	annotationFailCode   = "noderollout.dev/fail-exit-code"
	fieldManager         = "noderollout-smokejob"
)

type smoke struct {
	cs        kubernetes.Interface
	namespace string
	timeout   time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "smokejob: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("smokejob: all checks passed")
}

func run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("smokejob", pflag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the local stack")
	node := fs.String("node", "kwok-node-0", "a Ready fake Node")
	stuckNode := fs.String("stuck-node", "", "a fake Node labelled noderollout.dev/stuck=true (skip the stuck checks if empty)")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for each expectation")
	keep := fs.Bool("keep", false, "keep the namespace for inspection")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("no kubeconfig: set --kubeconfig or KUBECONFIG (source dev/env)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s := &smoke{cs: cs, namespace: fmt.Sprintf("smoke-%d", time.Now().Unix()), timeout: *timeout}
	if err := s.createNamespace(ctx); err != nil {
		return err
	}
	err = s.check(ctx, *node, *stuckNode)
	if *keep {
		fmt.Printf("kept namespace %s\n", s.namespace)
		return err
	}
	return errors.Join(err, s.deleteNamespace(ctx))
}

func (s *smoke) check(ctx context.Context, node, stuckNode string) error {
	// All Jobs start together; each check then waits for its own.
	jobs := []*batchv1.Job{
		newJob("complete", node, map[string]string{annotationRunSeconds: "2", annotationFailNodes: "not-" + node}),
		newJob("fail", node, map[string]string{annotationExitCode: "3"}),
		newJob("fail-listed", node, map[string]string{annotationFailNodes: "not-" + node + "," + node, annotationFailCode: "5"}),
		newJob("running", node, map[string]string{annotationRunSeconds: "600"}),
	}
	if stuckNode != "" {
		jobs = append(jobs, newJob("stuck", stuckNode, nil))
	}
	start := time.Now()
	for _, j := range jobs {
		if _, err := s.cs.BatchV1().Jobs(s.namespace).Create(ctx, j, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("create Job %s: %w", j.Name, err)
		}
	}

	job, err := s.waitJob(ctx, "complete", func(j *batchv1.Job) bool { return hasCondition(j, batchv1.JobComplete) })
	if err != nil {
		return err
	}
	took := time.Since(start)
	if took < 2*time.Second {
		return fmt.Errorf("Job complete finished after %s, before its run-seconds of 2", took.Round(time.Millisecond))
	}
	fmt.Printf("ok  Job complete: Complete after %.1fs (run-seconds 2), succeeded=%d\n", took.Seconds(), job.Status.Succeeded)

	job, err = s.waitJob(ctx, "fail", func(j *batchv1.Job) bool { return hasCondition(j, batchv1.JobFailed) })
	if err != nil {
		return err
	}
	if !hasCondition(job, batchv1.JobFailureTarget) {
		return errors.New("Job fail is Failed without a FailureTarget condition")
	}
	code, err := s.exitCode(ctx, "fail")
	if err != nil {
		return err
	}
	if code != 3 {
		return fmt.Errorf("Job fail: container exit code %d, want 3", code)
	}
	fmt.Printf("ok  Job fail: FailureTarget and Failed after %.1fs, container exit code %d\n", time.Since(start).Seconds(), code)

	if _, err := s.waitJob(ctx, "fail-listed", func(j *batchv1.Job) bool { return hasCondition(j, batchv1.JobFailed) }); err != nil {
		return err
	}
	if code, err = s.exitCode(ctx, "fail-listed"); err != nil {
		return err
	}
	if code != 5 {
		return fmt.Errorf("Job fail-listed: container exit code %d, want 5", code)
	}
	fmt.Printf("ok  Job fail-listed: Failed on a Node in fail-nodes, container exit code %d\n", code)

	if _, err := s.waitPodPhase(ctx, "running", corev1.PodRunning); err != nil {
		return err
	}
	if err := s.deleteJob(ctx, "running"); err != nil {
		return err
	}
	fmt.Println("ok  Job running: deleted with Background propagation, its Pod is gone")

	if stuckNode == "" {
		return nil
	}
	// A stuck Pod is one that is still Pending well after the others ran.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(start.Add(5 * time.Second))):
	}
	pod, err := s.waitPodPhase(ctx, "stuck", corev1.PodPending)
	if err != nil {
		return err
	}
	job, err = s.cs.BatchV1().Jobs(s.namespace).Get(ctx, "stuck", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if job.Status.Active != 1 || len(job.Status.Conditions) != 0 {
		return fmt.Errorf("Job stuck: active=%d conditions=%v, want 1 active Pod and no condition", job.Status.Active, job.Status.Conditions)
	}
	fmt.Printf("ok  Job stuck: Pod %s still Pending after %.1fs\n", pod.Name, time.Since(start).Seconds())
	if err := s.deleteJob(ctx, "stuck"); err != nil {
		return err
	}
	fmt.Println("ok  Job stuck: deleted with Background propagation, its Pod is gone")
	return nil
}

func newJob(name, node string, annotations map[string]string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
				Spec: corev1.PodSpec{
					NodeName:      node,
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "noderollout-smoke"}},
				},
			},
		},
	}
}

func hasCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (s *smoke) poll(ctx context.Context, what string, done wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, s.timeout, true, done)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (s *smoke) waitJob(ctx context.Context, name string, done func(*batchv1.Job) bool) (*batchv1.Job, error) {
	var job *batchv1.Job
	err := s.poll(ctx, "wait for Job "+name, func(ctx context.Context) (bool, error) {
		var err error
		job, err = s.cs.BatchV1().Jobs(s.namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && done(job), nil
	})
	if err != nil && job != nil {
		err = fmt.Errorf("%w; last status: %+v", err, job.Status)
	}
	return job, err
}

func (s *smoke) jobPods(ctx context.Context, job string) ([]corev1.Pod, error) {
	pods, err := s.cs.CoreV1().Pods(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

func (s *smoke) waitPodPhase(ctx context.Context, job string, phase corev1.PodPhase) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := s.poll(ctx, fmt.Sprintf("wait for the Pod of Job %s to be %s", job, phase), func(ctx context.Context) (bool, error) {
		pods, err := s.jobPods(ctx, job)
		if err != nil || len(pods) != 1 {
			return false, nil
		}
		pod = &pods[0]
		return pod.Status.Phase == phase, nil
	})
	return pod, err
}

func (s *smoke) exitCode(ctx context.Context, job string) (int32, error) {
	pod, err := s.waitPodPhase(ctx, job, corev1.PodFailed)
	if err != nil {
		return 0, err
	}
	for _, c := range pod.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil {
			return t.ExitCode, nil
		}
	}
	return 0, fmt.Errorf("Pod %s failed without a terminated container", pod.Name)
}

// deleteJob deletes a Job as noderollout does, with Background propagation (the default
// for Jobs orphans their Pods), and waits until the Job and its Pods are gone.
func (s *smoke) deleteJob(ctx context.Context, name string) error {
	err := s.cs.BatchV1().Jobs(s.namespace).Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: new(metav1.DeletePropagationBackground),
	})
	if err != nil {
		return fmt.Errorf("delete Job %s: %w", name, err)
	}
	return s.poll(ctx, "wait for the Pods of deleted Job "+name+" to go", func(ctx context.Context) (bool, error) {
		_, err := s.cs.BatchV1().Jobs(s.namespace).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		pods, err := s.jobPods(ctx, name)
		return err == nil && len(pods) == 0, nil
	})
}

func (s *smoke) createNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.namespace}}
	if _, err := s.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return err
	}
	// Pods are refused until the namespace's default ServiceAccount exists.
	return s.poll(ctx, "wait for ServiceAccount default in "+s.namespace, func(ctx context.Context) (bool, error) {
		_, err := s.cs.CoreV1().ServiceAccounts(s.namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func (s *smoke) deleteNamespace(ctx context.Context) error {
	start := time.Now()
	if err := s.cs.CoreV1().Namespaces().Delete(ctx, s.namespace, metav1.DeleteOptions{}); err != nil {
		return err
	}
	err := s.poll(ctx, "wait for namespace "+s.namespace+" to go", func(ctx context.Context) (bool, error) {
		_, err := s.cs.CoreV1().Namespaces().Get(ctx, s.namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err == nil {
		fmt.Printf("ok  namespace %s deleted in %.1fs\n", s.namespace, time.Since(start).Seconds())
	}
	return err
}
