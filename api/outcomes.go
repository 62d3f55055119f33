package api

// Outcomes of a node whose maintenance failed; the failure budget is charged with both.
const (
	// OutcomeDrainTimedOut: Pods still stood on the node when maintenance.drain.timeout passed
	// (typically a PodDisruptionBudget that allowed no disruption); no Job was created.
	OutcomeDrainTimedOut Outcome = "drainTimedOut"
	// OutcomeUnhealthy: after its Job succeeded the node did not meet maintenance.health's
	// conditions in time, or stopped meeting them during the soak.
	OutcomeUnhealthy Outcome = "unhealthy"
	// OutcomeRebootTimedOut: the node rebooted for maintenance.reboot did not come back (a new
	// boot ID and its health conditions met) within maintenance.reboot.timeout.
	OutcomeRebootTimedOut Outcome = "rebootTimedOut"
	// OutcomeCheckFailed: the node's gates.checkJob Job did not succeed.
	OutcomeCheckFailed Outcome = "checkFailed"
	// OutcomeBlocked: Pods matching gates.blockingPods.selector still ran on the node when its
	// timeout passed; nothing was done to the node. Not charged to the failure budget.
	OutcomeBlocked Outcome = "blocked"
)

// Error types of the maintenance activities, non-retryable, and reason words of a node's result.
const (
	ErrDrainTimedOut = "DrainTimedOut"
	// ErrDrainRefused: a Pod on the node would lose data the request did not allow losing.
	ErrDrainRefused = "DrainRefused"
	ErrUnhealthy    = "Unhealthy"
	// ErrRebootTimedOut: the node did not come back from its reboot in time.
	ErrRebootTimedOut = "RebootTimedOut"
	// ErrBlocked: blocking Pods still ran on the node when gates.blockingPods.timeout passed.
	ErrBlocked = "Blocked"
	// ErrCheckFailed: the node's check Job failed (the reason word of a checkFailed node).
	ErrCheckFailed = "CheckFailed"
)

// Outcome is how one node's rollout ended. The values are part of the public API (status
// query, results, Node annotations), so they never change spelling.
type Outcome string

const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeTimedOut  Outcome = "timedOut"
	OutcomeSkipped   Outcome = "skipped"
	OutcomeNodeGone  Outcome = "nodeGone"
	// OutcomeAborted: the rollout was cancelled while the node's Job ran; the Job was deleted.
	OutcomeAborted Outcome = "aborted"
)

// Error types carried by the activities' ApplicationErrors. Callers switch on
// ApplicationError.Type(); retry policies list the non-retryable ones in NonRetryableErrorTypes.
// Each is also a reason word of a node's result (ReasonForError); docs/outcomes.md lists them all.
const (
	// ErrInvalidRequest: the request (or the template it names) is malformed, or the API
	// server rejected a write as invalid; retrying cannot help.
	ErrInvalidRequest = "InvalidRequest"
	// ErrForeignObject: a Job with our deterministic name exists but was not made by this rollout.
	ErrForeignObject = "ForeignObject"
	// ErrForbidden: the worker's identity may not do what the rollout needs (RBAC).
	ErrForbidden = "Forbidden"
	// ErrNodeGone: the node was deleted before or while its Job ran.
	ErrNodeGone = "NodeGone"
	// ErrQuotaExceeded: a ResourceQuota of the namespace refused the Job (a 403 that is not
	// RBAC). Not retried: a quota frees up only when someone acts.
	ErrQuotaExceeded = "QuotaExceeded"
	// ErrAdmissionDenied: an admission webhook or ValidatingAdmissionPolicy refused the request.
	ErrAdmissionDenied = "AdmissionDenied"
	// ErrAdmissionUnavailable: an admission webhook could not be called ("failed calling
	// webhook"). RETRYABLE: the webhook may come back; it is a type only so that, when it is
	// the error the retries end with, the node's reason says what stood in the way.
	ErrAdmissionUnavailable = "AdmissionUnavailable"
	// ErrPolicyDenied: the worker's policy (--policy-file) refuses the request or a Job.
	ErrPolicyDenied = "PolicyDenied"
	// ErrNotStartedByARollout: the workflow that called a writing activity is not a node
	// workflow that a running Rollout started (see Lineage).
	ErrNotStartedByARollout = "NotStartedByARollout"
	// ErrNoPrometheus: the request has a metric gate and the worker names no Prometheus.
	ErrNoPrometheus = "NoPrometheus"
)

// Reasons recorded in NodeResult.Reason when the Job itself cannot say. Together with the error
// types above, the Job conditions' own reasons (BackoffLimitExceeded, DeadlineExceeded,
// PodFailurePolicy, ...) and the rollout's AlreadyDone and NodeNotFound, they are every reason a
// node can end with; docs/outcomes.md explains each.
const (
	ReasonJobDeleted  = "JobDeleted"
	ReasonJobTimeout  = "JobTimeout"
	ReasonNodeDeleted = "NodeDeleted"
	ReasonAborted     = "Aborted"
	// ReasonTerminationStuck: the Job's outcome was decided (FailureTarget or SuccessCriteriaMet)
	// but its Pods did not stop within five minutes; the Job was deleted.
	ReasonTerminationStuck = "TerminationStuck"
	// ReasonAPIError: the last error of an activity that ran out of retries was none of ours
	// (the API server unreachable, 5xx, timeouts).
	ReasonAPIError = "APIError"
	// ReasonActivityTimeout: an activity ran past its own timeouts (worker overloaded or gone).
	ReasonActivityTimeout = "ActivityTimeout"
	// ReasonRecordedOnNode: the node's workflow task that finalized it was lost and ran again;
	// the outcome is the one its first run recorded on the Node, the Job's details are gone.
	ReasonRecordedOnNode = "RecordedOnNode"
	// ReasonNodeWorkflowTerminated: someone terminated the node's workflow (Temporal UI, CLI);
	// none of its clean-up ran, so its Job may still run and our cordon stays.
	ReasonNodeWorkflowTerminated = "NodeWorkflowTerminated"
)

// KeepJobs says which finished Jobs FinalizeJob leaves in place for inspection.
type KeepJobs string

const (
	KeepNever  KeepJobs = "never"
	KeepFailed KeepJobs = "failed"
	KeepAlways KeepJobs = "always"
)
