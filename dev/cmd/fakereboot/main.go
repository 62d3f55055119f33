// Command fakereboot reboots the local stack's fake Nodes the way a reboot Job reboots a real
// one, so that reboot steps can be tested on kwok (dev/up.sh runs it). A Pod annotated
// noderollout.dev/reboot-downtime (a Go duration, e.g. "20s") that starts running on a Node
// takes the Node down with it:
//
//   - the Node gets a new status.nodeInfo.bootID and Ready=False (kwok's node-ready stage leaves
//     Nodes annotated noderollout.dev/rebooting alone), and the annotation;
//   - the Pod dies with the Node: it is marked Failed (reason NodeRebooted), as the kubelet
//     reports the Pods it finds dead after a reboot;
//   - after the downtime the annotation is removed, and kwok makes the Node Ready again.
//
// A downtime of "never" leaves the Node down (a Node that does not come back).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// DowntimeAnnotation on a Pod makes its Node reboot when the Pod runs.
	DowntimeAnnotation = "noderollout.dev/reboot-downtime"
	// RebootingAnnotation on a Node says it is down until the time it holds (RFC 3339), or
	// "never".
	RebootingAnnotation = "noderollout.dev/rebooting"
	fieldManager        = "fakereboot"
)

func main() {
	kubeconfig := pflag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the stack")
	pflag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("fakereboot: %v", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("fakereboot: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r := &rebooter{kube: kube}
	if err := r.run(ctx); err != nil {
		log.Fatalf("fakereboot: %v", err)
	}
}

type rebooter struct {
	kube    kubernetes.Interface
	handled sync.Map // UIDs of the reboot Pods already acted on
}

func (r *rebooter) run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(r.kube, 0)
	pods := factory.Core().V1().Pods().Informer()
	onPod := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			r.consider(ctx, pod)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onPod,
		UpdateFunc: func(_, obj any) { onPod(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return ctx.Err()
	}
	// Nodes left down by an earlier run come back when their time is up.
	nodes, err := r.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if until, ok := n.Annotations[RebootingAnnotation]; ok {
			go r.upAt(ctx, n.Name, until)
		}
	}
	log.Printf("fakereboot: watching Pods annotated %s", DowntimeAnnotation)
	<-ctx.Done()
	return nil
}

// consider reboots the Node of a reboot Pod that runs, once per Pod.
func (r *rebooter) consider(ctx context.Context, pod *corev1.Pod) {
	downtime, ok := pod.Annotations[DowntimeAnnotation]
	if !ok || pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return
	}
	if _, seen := r.handled.LoadOrStore(pod.UID, true); seen {
		return
	}
	until := "never"
	if downtime != "never" {
		d, err := time.ParseDuration(downtime)
		if err != nil {
			log.Printf("fakereboot: pod %s/%s: %s %q is not a duration", pod.Namespace, pod.Name, DowntimeAnnotation, downtime)
			return
		}
		until = time.Now().Add(d).UTC().Format(time.RFC3339Nano)
	}
	if err := r.down(ctx, pod.Spec.NodeName, until); err != nil {
		log.Printf("fakereboot: node %s: %v", pod.Spec.NodeName, err)
		return
	}
	if err := r.podDied(ctx, pod); err != nil {
		log.Printf("fakereboot: pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	log.Printf("fakereboot: node %s rebooting (pod %s/%s), down until %s", pod.Spec.NodeName, pod.Namespace, pod.Name, until)
	go r.upAt(ctx, pod.Spec.NodeName, until)
}

// down marks the Node rebooting: a new boot ID, not Ready.
func (r *rebooter) down(ctx context.Context, node, until string) error {
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RebootingAnnotation: until}}})
	if _, err := r.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, meta, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return err
	}
	n, err := r.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	n.Status.NodeInfo.BootID = newBootID()
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Type == corev1.NodeReady {
			c.Status, c.Reason, c.Message = corev1.ConditionFalse, "KubeletNotReady", "node is rebooting"
			c.LastTransitionTime, c.LastHeartbeatTime = now, now
		}
	}
	_, err = r.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// podDied marks the reboot Pod Failed, as its Node's kubelet reports it after the reboot.
func (r *rebooter) podDied(ctx context.Context, pod *corev1.Pod) error {
	p := pod.DeepCopy()
	now := metav1.Now()
	p.Status.Phase = corev1.PodFailed
	p.Status.Reason = "NodeRebooted"
	p.Status.Message = "the node rebooted"
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		cs.Ready = false
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "NodeRebooted", FinishedAt: now}}
	}
	_, err := r.kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// upAt brings the Node back at until: the annotation goes, and kwok makes it Ready.
func (r *rebooter) upAt(ctx context.Context, node, until string) {
	if until == "never" {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, until)
	if err != nil {
		log.Printf("fakereboot: node %s: %s %q is not a time", node, RebootingAnnotation, until)
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(at)):
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, RebootingAnnotation))
	for {
		_, err := r.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		if err == nil || ctx.Err() != nil {
			log.Printf("fakereboot: node %s back up", node)
			return
		}
		log.Printf("fakereboot: node %s: bringing it back: %v (retrying)", node, err)
		time.Sleep(time.Second)
	}
}

func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
