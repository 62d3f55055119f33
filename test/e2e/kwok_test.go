//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// The suite cannot hang on a Pod that kwok leaves running. kwok applies a stage only on an
// event for the object, and now and then the event that would finish a Pod never comes: the
// Pod stays Running, and its rollout waited out the default jobTimeout of 30 minutes. So:
//   - every rollout a test starts has a jobTimeout just above what its Pods need (their
//     run-seconds plus jobTimeoutMargin), so a stuck Pod fails its test in about a minute;
//   - the watchdog kicks each Pod found Running past its run time: an annotation is an event,
//     and dev/kwok/pod-run.yaml finishes a kicked Pod at once;
//   - a test whose rollout still fails names the Pods the watchdog found (Succeeded).

// jobTimeoutMargin is how much longer than its Pods' run time a test's Job may take: kwok's
// and the Job controller's delays on a loaded machine, and a kick's.
const jobTimeoutMargin = time.Minute

// kickAfter is how long past its run time a Pod may stay Running before the watchdog kicks it.
const kickAfter = 10 * time.Second

// Annotations of dev/kwok/pod-run.yaml: the run time, a Pod that kwok holds (a missed event,
// on purpose), a kicked Pod; noKick tells the watchdog to only report a Pod.
const (
	runSecondsKey = "noderollout.dev/run-seconds"
	holdKey       = "noderollout.dev/hold"
	kickedKey     = "noderollout.dev/kicked"
	noKickKey     = "e2e.noderollout.dev/no-kick"
)

var runSecondsInTemplate = regexp.MustCompile(regexp.QuoteMeta(runSecondsKey) + `: "([0-9]+(?:\.[0-9]+)?)"`)

// withJobTimeout gives a request that sets no jobTimeout one just above what its Pods need:
// their run-seconds (from the inline template) and jobTimeoutMargin.
func withJobTimeout(req api.RolloutRequest) api.RolloutRequest {
	m := runSecondsInTemplate.FindStringSubmatch(req.JobTemplate)
	if req.JobTimeout != "" || m == nil {
		return req
	}
	run, _ := strconv.ParseFloat(m[1], 64)
	req.JobTimeout = (time.Duration(math.Ceil(run))*time.Second + jobTimeoutMargin).String()
	return req
}

// kwokWatchdog kicks the Pods of the suite's rollouts that kwok left Running past their run
// time, and remembers each by its rollout.
type kwokWatchdog struct {
	mu    sync.Mutex
	stuck map[string][]string // by rollout: what was found and done
	seen  map[types.UID]bool
}

var watchdog = &kwokWatchdog{stuck: map[string][]string{}, seen: map[types.UID]bool{}}

// run looks every two seconds until ctx ends.
func (w *kwokWatchdog) run(ctx context.Context) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.look(ctx, time.Now())
		}
	}
}

func (w *kwokWatchdog) look(ctx context.Context, now time.Time) {
	pods, err := stack.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		LabelSelector: jobspec.LabelRollout, FieldSelector: "status.phase=Running"})
	if err != nil {
		return // the API server may be down in a fault test: look again later
	}
	for _, p := range pods.Items {
		due, ok := runsUntil(&p)
		if !ok || p.DeletionTimestamp != nil || now.Before(due.Add(kickAfter)) || w.seenBefore(p.UID) {
			continue
		}
		what := fmt.Sprintf("Pod %s/%s on node %s was still Running %s after its run-seconds (%s) ended",
			p.Namespace, p.Name, p.Spec.NodeName, now.Sub(due).Round(time.Second), p.Annotations[runSecondsKey])
		if _, no := p.Annotations[noKickKey]; no {
			what += "; not kicked (the test asked so)"
		} else {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kickedKey, now.UTC().Format(time.RFC3339))
			_, err := stack.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			what += "; kicked it"
			if err != nil {
				what += " in vain: " + err.Error()
			}
		}
		w.record(p.Labels[jobspec.LabelRollout], what)
	}
}

// runsUntil is when a Pod is to finish by its run-seconds: from its start, for a Pod that
// finishes at all (restartPolicy Always runs for ever).
func runsUntil(p *corev1.Pod) (time.Time, bool) {
	run, err := strconv.ParseFloat(p.Annotations[runSecondsKey], 64)
	if err != nil || p.Status.StartTime == nil || p.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		return time.Time{}, false
	}
	// startTime is whole seconds: the Pod may have started up to a second later.
	return p.Status.StartTime.Add(time.Duration(run*float64(time.Second)) + time.Second), true
}

func (w *kwokWatchdog) seenBefore(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := w.seen[uid]
	w.seen[uid] = true
	return seen
}

func (w *kwokWatchdog) record(rollout, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stuck[rollout] = append(w.stuck[rollout], what)
	fmt.Printf("e2e: kwok watchdog: rollout %s: %s\n", rollout, what)
}

// report says what the watchdog found of the rollout's Pods; "" when nothing.
func (w *kwokWatchdog) report(rollout string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := append([]string(nil), w.stuck[rollout]...)
	if len(found) == 0 {
		return ""
	}
	sort.Strings(found)
	return "kwok left Pods running: " + strings.Join(found, "; ")
}

// heldFleet is a one-node fleet whose rollout's Pod kwok holds Running (a missed event, on
// purpose), with the watchdog told to kick it or not.
func heldRequest(t *testing.T, kick bool) (*Fleet, api.RolloutRequest) {
	t.Helper()
	f := NewFleet(t, 1)
	annotations := map[string]string{holdKey: "true"}
	if !kick {
		annotations[noKickKey] = "true"
	}
	req := f.Request("held", 2*time.Second)
	req.JobTemplate = JobTemplate(2*time.Second, annotations)
	requireKwokHolds(t, f)
	return f, req
}

// requireKwokHolds skips a test whose stack's kwok runs stages from before noderollout.dev/hold
// (a stack started from an older checkout): a held Pod would finish on its own.
func requireKwokHolds(t *testing.T, f *Fleet) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-probe", Namespace: f.Namespace,
			Labels:      map[string]string{TestLabel: f.ID},
			Annotations: map[string]string{holdKey: "true", runSecondsKey: "0"}},
		Spec: corev1.PodSpec{NodeName: f.Nodes[0], RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	_, err := stack.Kube.CoreV1().Pods(f.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	defer func() {
		zero := int64(0)
		_ = stack.Kube.CoreV1().Pods(f.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}()
	waitFor(t, 30*time.Second, "the probe Pod to run", func() bool {
		p, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase != corev1.PodPending
	})
	time.Sleep(3 * time.Second)
	p, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	if p.Status.Phase != corev1.PodRunning {
		t.Skipf("the stack's kwok finished a held Pod (%s): it runs stages from before noderollout.dev/hold; restart the stack from this checkout (dev/down.sh; dev/up.sh)", p.Status.Phase)
	}
}

// A Pod whose finishing event kwok missed is found and kicked, and its rollout succeeds
// seconds after the Pod's run time, naming the Pod.
func TestKwokMissedEventIsKicked(t *testing.T) {
	_, req := heldRequest(t, true)
	start := time.Now()
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 1, res.Counts.Succeeded)
	require.Less(t, time.Since(start), 45*time.Second, "kicked within kickAfter of its run time")
	report := watchdog.report(req.Name)
	require.Contains(t, report, "kicked it")
	require.Regexp(t, `Pod `+regexp.QuoteMeta(req.Namespace)+`/`+regexp.QuoteMeta(req.Name)+`-\S+ on node \S+ was still Running`, report)
}

// A Pod that stays Running for good fails its node at its jobTimeout, a minute past its run
// time rather than the default 30 minutes, and the failure names the Pod.
func TestStuckPodFailsItsTestInAMinuteNamingThePod(t *testing.T) {
	_, req := heldRequest(t, false)
	req = withJobTimeout(req)
	require.Equal(t, "1m2s", req.JobTimeout)
	start := time.Now()
	res, err := Result(t, Start(t, req))
	require.Error(t, err)
	require.Equal(t, 1, res.Counts.TimedOut, "%v", err)
	require.Less(t, time.Since(start), 2*time.Minute)
	failure := stuckFailure(req.Name, err)
	require.Contains(t, failure, api.ReasonJobTimeout)
	require.Regexp(t, `Pod `+regexp.QuoteMeta(req.Namespace)+`/`+regexp.QuoteMeta(req.Name)+`-\S+ on node \S+ was still Running .*not kicked`, failure)
}

// stuckFailure is how Succeeded reports a rollout that failed: its error and what the watchdog
// found of its Pods.
func stuckFailure(rollout string, err error) string {
	msg := fmt.Sprintf("rollout %s failed: %v", rollout, err)
	if report := watchdog.report(rollout); report != "" {
		msg += "\n" + report
	}
	return msg
}
