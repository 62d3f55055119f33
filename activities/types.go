// Package activities holds every Kubernetes call a rollout makes: listing nodes, and creating,
// watching and finalizing one node's Job. Each exported method of Activities is a Temporal
// activity; every write is idempotent because activities are retried.
package activities

import (
	"cmp"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// NonRetryableErrors lists every non-retryable error type above, for
// RetryPolicy.NonRetryableErrorTypes.
// ErrQuotaExceeded is not among them: a full quota is retried until the node's deadline (a
// Job that cannot fit any quota is refused non-retryably by the error itself).
var NonRetryableErrors = []string{api.ErrInvalidRequest, api.ErrForeignObject, api.ErrForbidden, api.ErrNodeGone, api.ErrAdmissionDenied, api.ErrPolicyDenied,
	api.ErrDrainTimedOut, api.ErrDrainRefused, api.ErrUnhealthy, api.ErrNotStartedByARollout, api.ErrNoPrometheus,
	api.ErrRebootTimedOut, api.ErrBlocked, api.ErrCheckFailed}

// PrepareTemplateInput asks for the rollout's Job template to be loaded and checked once,
// before any node starts.
type PrepareTemplateInput struct {
	Namespace   string           `json:"namespace"`
	Template    string           `json:"template,omitempty"`
	TemplateRef *api.TemplateRef `json:"templateRef,omitempty"`
	// Store keeps the template in an immutable ConfigMap named after its hash
	// (TemplateConfigMapName) and returns the hash alone: CreateJob reads it back by hash, so
	// the template never travels through the workflow histories.
	Store bool `json:"store,omitempty"`
	// NodeSelector and Parallelism are what the worker's policy judges besides the template.
	NodeSelector string `json:"nodeSelector,omitempty"`
	Parallelism  int    `json:"parallelism,omitempty"`
	// Cordon and Drain are the request's maintenance, which the policy judges at the start
	// too, so a rollout whose namespace may not drain fails before any node starts.
	Cordon bool `json:"cordon,omitempty"`
	Drain  bool `json:"drain,omitempty"`
	// OnSuccess is maintenance.onSuccess, whose label and taint keys the policy judges at the
	// start too, before any node is written to.
	OnSuccess *api.OnSuccess `json:"onSuccess,omitempty"`
}

// PreparedTemplate is a template that parsed and validated, with its content hash. Template is
// empty when it was stored.
type PreparedTemplate struct {
	Template string `json:"template,omitempty"`
	Hash     string `json:"hash"`
	// MaxParallelism is the worker policy's cap (0: none), for setParallelism while running.
	MaxParallelism int `json:"maxParallelism,omitempty"`
	// Tolerations are the template Pod's, for the listing's taint check; TolerationsRead says
	// this worker read them (a result recorded before the check has neither, and checks none).
	Tolerations     []corev1.Toleration `json:"tolerations,omitempty"`
	TolerationsRead bool                `json:"tolerationsRead,omitempty"`
}

// ListNodesInput selects nodes: Names (explicit) or Selector/FieldSelector (exactly one of
// Names and Selector is set; FieldSelector may accompany Selector). Results come sorted by
// name; After and Limit page through them so a huge fleet never travels in one payload.
type ListNodesInput struct {
	Rollout       string   `json:"rollout"`
	Names         []string `json:"names,omitempty"`
	Selector      string   `json:"selector,omitempty"`
	FieldSelector string   `json:"fieldSelector,omitempty"`
	TemplateHash  string   `json:"templateHash"`
	Rerun         bool     `json:"rerun,omitempty"`
	After         string   `json:"after,omitempty"` // only names sorted strictly after this one
	Limit         int      `json:"limit"`           // at most this many names in Nodes+Done+Missing
	// Continue is a continue token of an earlier slice's listing (its result's Continue, or
	// the token that slice was read from) at or before After: the listing resumes there
	// instead of reading from the first page. Empty: from the first page.
	Continue string `json:"continue,omitempty"`
	// Labels are node label keys whose values the result reports per node.
	Labels []string `json:"labels,omitempty"`
	// TaintCheck, when set, lists a node whose taints the Pod does not tolerate as Untolerated.
	TaintCheck *api.TaintCheck `json:"taintCheck,omitempty"`
}

// ListNodesResult is one slice of the selected nodes, in name order.
type ListNodesResult struct {
	Nodes   []string `json:"nodes,omitempty"`   // to run
	Done    []string `json:"done,omitempty"`    // marked done for this template hash: skipped unless rerun
	Missing []string `json:"missing,omitempty"` // explicit names with no Node object
	// Unselected are explicit names whose Node the input's selectors do not select.
	Unselected []string `json:"unselected,omitempty"`
	Next       string   `json:"next,omitempty"` // pass as After for the next slice
	More       bool     `json:"more"`           // another slice follows
	Total      int      `json:"total"`          // nodes selected in all (unique explicit names, or all matches)
	// Marks are the continue tokens of the pages that held the slice (the last one too), each
	// with the first name it held, in order ("" for the first page): a listing may resume
	// within the slice from the page of its cursor.
	Marks []api.ListingMark `json:"marks,omitempty"`
	// Continue resumes the listing right after Next (pass it as the next slice's Continue);
	// empty when the listing ended or its position is not known (the first slice, which reads
	// every page to count; pages that came out of name order).
	Continue string `json:"continue,omitempty"`
	// Labels holds, per listed node carrying any, the values of the input's Labels keys.
	Labels map[string]map[string]string `json:"labels,omitempty"`
	// Untolerated holds, per node not run for a taint its Pod does not tolerate, that taint
	// (key=value:Effect).
	Untolerated map[string]string `json:"untolerated,omitempty"`
}

// JobRequest is everything CreateJob needs to make one node's Job.
type JobRequest struct {
	Rollout   string `json:"rollout"`
	Namespace string `json:"namespace"`
	Node      string `json:"node"`
	// RunID is the NodeRollout child's run ID: part of the Job name, so a retried CreateJob
	// adopts its own Job while a later rollout of the same node makes a fresh one.
	RunID string `json:"runID"`
	// Template is the template text; when empty, the one stored under TemplateHash is used.
	Template     string        `json:"template,omitempty"`
	TemplateHash string        `json:"templateHash"`
	Owner        *api.OwnerRef `json:"owner,omitempty"`
	// JobTimeoutSeconds becomes activeDeadlineSeconds when the template sets none.
	JobTimeoutSeconds int64 `json:"jobTimeoutSeconds"`
	// TTLSecondsAfterFinished becomes ttlSecondsAfterFinished when the template sets none.
	TTLSecondsAfterFinished int32 `json:"ttlSecondsAfterFinished"`
	// Requester is who started the rollout (the starter's claim), recorded on the Job.
	Requester string `json:"requester,omitempty"`
	// FirstTask says the create runs in its node's first workflow task, so no earlier run of
	// it can have finished the node. Otherwise the create reads the Node first: a workflow task
	// that created, watched and finalized a Job but could not report it (the Temporal server
	// was down) runs again from the start, and must not create the Job its first run deleted.
	FirstTask bool `json:"firstTask,omitempty"`
	// Parent is the calling node run's parent as its history records it (the Temporal server
	// writes it; no starter can): the node sets it for its local activities, so Lineage need not
	// ask Temporal who the parent is. It is never sent: an activity scheduled over the wire,
	// which anyone could fill, arrives without it, and Lineage trusts it only in a local one.
	Parent *WorkflowRun `json:"-"`
}

// WorkflowRun is one run of a workflow: a node's parent rollout, or a node the rollout lists.
type WorkflowRun struct {
	ID, RunID string
}

// JobRef identifies a Job the rollout created (or adopted). UID is empty when the Job's name is
// known but CreateJob never answered (its reply was lost): then RunID, the NodeRollout run that
// names it, tells our Job from a stranger's before anything is deleted.
type JobRef struct {
	// Namespace, Name, RunID and Node are empty only in a trimmed reference (TrimmedOf).
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	UID       string    `json:"uid,omitempty"`
	RunID     string    `json:"runID,omitempty"`
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// NodeUID is the Node's UID when the Job was created (empty in histories from before it
	// was recorded); the outcome Event names it.
	NodeUID string `json:"nodeUID,omitempty"`
	// Finalized is set instead of a created Job when this run had finalized the node already
	// (the Node records the run next to its outcome marker): the outcome the marker holds.
	Finalized api.Outcome `json:"finalized,omitempty"`
}

// PlannedJob is the Job a request makes, as its node workflow knows it before any answer:
// enough to find the Job and delete it.
func PlannedJob(in JobRequest) JobRef {
	return JobRef{Namespace: in.Namespace, Name: jobspec.JobName(in.Rollout, in.Node, in.RunID), Node: in.Node, RunID: in.RunID}
}

// TrimmedOf leaves out of r what planned already says (the namespace, name, node and run), so
// a history that records r need not repeat the node's input; RestoredFrom puts it back.
func (r JobRef) TrimmedOf(planned JobRef) JobRef {
	if r.Namespace == planned.Namespace {
		r.Namespace = ""
	}
	if r.Name == planned.Name {
		r.Name = ""
	}
	if r.Node == planned.Node {
		r.Node = ""
	}
	if r.RunID == planned.RunID {
		r.RunID = ""
	}
	return r
}

// RestoredFrom is r with what TrimmedOf left out taken from planned.
func (r JobRef) RestoredFrom(planned JobRef) JobRef {
	r.Namespace = cmp.Or(r.Namespace, planned.Namespace)
	r.Name = cmp.Or(r.Name, planned.Name)
	r.Node = cmp.Or(r.Node, planned.Node)
	r.RunID = cmp.Or(r.RunID, planned.RunID)
	return r
}

// WaitJobInput asks to wait until the Job finishes, disappears, or runs past its deadline.
type WaitJobInput struct {
	Job JobRef `json:"job"`
	// TimeoutSeconds counts from Job creation (so a retried attempt keeps the same deadline);
	// past it the Job is deleted and the outcome is timedOut. Zero means no limit.
	TimeoutSeconds int64 `json:"timeoutSeconds"`
	// ReadRebootRequest: a Job that succeeded is read for a reboot request (JobEnd.RebootRequested).
	ReadRebootRequest bool `json:"readRebootRequest,omitempty"`
}

// WatchJobInput asks to wait as WaitJob does, for at most ForSeconds.
type WatchJobInput struct {
	WaitJobInput
	ForSeconds int64 `json:"forSeconds"`
}

// JobWatch is what WatchJob saw: the Job's end, or Running when it had not ended in time.
type JobWatch struct {
	Running bool   `json:"running,omitempty"`
	End     JobEnd `json:"end"`
}

// JobEnd is how a Job ended, as WaitJob saw it.
type JobEnd struct {
	Outcome    api.Outcome `json:"outcome"`
	Reason     string      `json:"reason,omitempty"`
	Message    string      `json:"message,omitempty"`
	FinishedAt time.Time   `json:"finishedAt"`
	// PodReason is why the Job's Pod had not finished when the Job timed out, as read just
	// before the Pod was deleted (see FinalizeResult.PodReason); FinalizeJob reports it.
	PodReason string `json:"podReason,omitempty"`
	// RebootRequested: the Job succeeded and asked for a reboot (api.RebootRequiredMessage);
	// read only when WaitJobInput.ReadRebootRequest.
	RebootRequested bool `json:"rebootRequested,omitempty"`
}

// FinalizeInput records a node's outcome and tidies up its Job.
type FinalizeInput struct {
	Rollout      string       `json:"rollout"`
	Node         string       `json:"node"`
	TemplateHash string       `json:"templateHash"`
	Job          *JobRef      `json:"job,omitempty"` // nil when no Job was created
	End          JobEnd       `json:"end"`
	KeepJobs     api.KeepJobs `json:"keepJobs"`
	Requester    string       `json:"requester,omitempty"` // recorded on the Node next to the marker
	// RunID is the NodeRollout run finalizing the node, recorded on the Node next to the
	// marker (see JobRequest.FirstTask); empty in histories from before it, then Job.RunID.
	RunID string `json:"runID,omitempty"`
	// UndoOf, on an undo rollout's node, is the undone rollout: a succeeded undo marks that
	// rollout's marker undone (undo.go).
	UndoOf string `json:"undoOf,omitempty"`
	// StepsFollow: the node's maintenance goes on after this Job's success (reboot, health,
	// check, soak, uncordon). The marker records the success, so a run repeated from its start
	// creates no second Job, but the Event says the Job succeeded, not the node, and the node is
	// not counted: its own outcome is recorded when its maintenance ends.
	StepsFollow bool `json:"stepsFollow,omitempty"`
	// nodeAtCreate is the Node as RunJob's create read it, in the same call: the marker's patch
	// is first sent conditional on its resourceVersion, without reading the Node again. Never
	// in a history: a finalize of its own reads the Node.
	nodeAtCreate *corev1.Node
}

// FinalizeResult carries what was learned from a failed or timed-out Job's Pod.
type FinalizeResult struct {
	LogTail            string `json:"logTail,omitempty"` // at most 4 KiB
	ExitCode           *int32 `json:"exitCode,omitempty"`
	TerminationMessage string `json:"terminationMessage,omitempty"`
	// PodReason says why the Pod never ran or never finished, when it did not terminate:
	// "Unschedulable: <message>", "ImagePullBackOff: <message>", "ContainerCreating", ...
	PodReason string `json:"podReason,omitempty"`
}
