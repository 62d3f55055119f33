package api

import (
	"time"
)

// The steps a node workflow reports, in the order they come.
const (
	NodeStepCordon   = "cordon"
	NodeStepDrain    = "drain"
	NodeStepJob      = "job"      // the Job being created, or running
	NodeStepRelease  = "delete"   // the Job being deleted, its Pods awaited (abort, failure)
	NodeStepFinalize = "finalize" // the outcome being recorded on the Node, the Job tidied
	NodeStepHealth   = "health"
	NodeStepSoak     = "soak"
	NodeStepUncordon = "uncordon"
	// Steps of the node's reboot, gates and onSuccess (issue 33), in their order: blockingPods
	// comes before cordon; reboot after job; checkJob after health; onSuccess after soak.
	NodeStepBlockingPods = "blockingPods"
	NodeStepReboot       = "reboot"
	NodeStepCheckJob     = "checkJob"
	NodeStepOnSuccess    = "onSuccess"
)

// NodeStep is what a node workflow is doing now.
type NodeStep struct {
	Step  string    `json:"step"`
	Since time.Time `json:"since"`
	// Seconds is the step's length where it has one: the soak's hold, the drain's and the
	// health gate's timeout, the Job's timeout.
	Seconds int64 `json:"seconds,omitempty"`
	// Job is namespace/name of the node's Job, once it has one.
	Job string `json:"job,omitempty"`
}

// NodeResult is how one node's rollout ended; NodeRollout returns it (as the details of its
// error when the node did not succeed).
type NodeResult struct {
	// Node is empty only in a NodeRolloutV5's own result: its parent fills it in.
	Node               string  `json:"node,omitempty"`
	Outcome            Outcome `json:"outcome"`
	Job                string  `json:"job,omitempty"`
	Reason             string  `json:"reason,omitempty"`
	Message            string  `json:"message,omitempty"`
	LogTail            string  `json:"logTail,omitempty"`
	ExitCode           *int32  `json:"exitCode,omitempty"`
	TerminationMessage string  `json:"terminationMessage,omitempty"`
	// PodReason says why a node's Pod never ran or never finished (Unschedulable,
	// ImagePullBackOff, ...), when it did not terminate.
	PodReason  string    `json:"podReason,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitempty"`
	FinishedAt time.Time `json:"finishedAt,omitempty"`
	// Undone: maintenance.onFailure undo ran the undo Job (UndoJob) on the failed node and it
	// succeeded; UndoFailed says how it ended when it did not (the node stays cordoned).
	Undone     bool   `json:"undone,omitempty"`
	UndoFailed string `json:"undoFailed,omitempty"`
	UndoJob    string `json:"undoJob,omitempty"`
	// OnDeselect: this turn of a converging rollout ran onDeselect's Job, on a node that had
	// left the selector (its outcome is that Job's).
	OnDeselect bool `json:"onDeselect,omitempty"`
}

// Counts tallies nodes by state. Pending counts only nodes already listed.
type Counts struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Waiting   int `json:"waiting"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	TimedOut  int `json:"timedOut"`
	Skipped   int `json:"skipped"`
	NodeGone  int `json:"nodeGone"`
	Aborted   int `json:"aborted"`
}

// Finished is the number of nodes with a final outcome.
func (c Counts) Finished() int {
	return c.Succeeded + c.Failed + c.TimedOut + c.Skipped + c.NodeGone + c.Aborted
}

// Failures is what the failure budget is charged with.
func (c Counts) Failures() int { return c.Failed + c.TimedOut }

func (c *Counts) Add(o Outcome) {
	switch o {
	case OutcomeSucceeded:
		c.Succeeded++
	case OutcomeFailed, OutcomeDrainTimedOut, OutcomeUnhealthy, OutcomeRebootTimedOut, OutcomeCheckFailed:
		// Maintenance failures count as failed (and so against the budget); their own
		// outcome word is in the node's result.
		c.Failed++
	case OutcomeTimedOut:
		c.TimedOut++
	case OutcomeSkipped, OutcomeBlocked:
		// A blocked node was not touched: it is skipped, its own word in its result.
		c.Skipped++
	case OutcomeNodeGone:
		c.NodeGone++
	case OutcomeAborted:
		c.Aborted++
	}
}

// MaxReportedFailures caps the failed nodes carried in results, status and continue-as-new.
const MaxReportedFailures = 100

// RolloutResult is what a finished rollout returns (and, on failure, the details of its error).
type RolloutResult struct {
	Name           string        `json:"name"`
	TemplateHash   string        `json:"templateHash"`
	Selected       int           `json:"selected"`
	Counts         Counts        `json:"counts"`
	Failures       []NodeResult  `json:"failures,omitempty"`
	Planned        []PlannedNode `json:"planned,omitempty"` // dry run only
	ContinuedAsNew int           `json:"continuedAsNew"`
	StartedAt      time.Time     `json:"startedAt"`
	FinishedAt     time.Time     `json:"finishedAt"`
}

// PlannedNode is one node a dry run would roll out to.
type PlannedNode struct {
	Node string `json:"node"`
	// JobPrefix is the start of the Job's name; the suffix depends on the run that creates it.
	JobPrefix string `json:"jobPrefix,omitempty"`
	// Skip is why the node would not get a Job ("done" for this template, or "missing").
	Skip string `json:"skip,omitempty"`
	// Reason says more of a skip: the taint of an untoleratedTaint.
	Reason string `json:"reason,omitempty"`
	// Drain is what maintenance.drain would evict on the node, and which budgets would block it.
	Drain *DrainPlan `json:"drain,omitempty"`
	// Undo, in the dry run of an undo (undoOf), is what the node goes back from and to.
	Undo *UndoNode `json:"undo,omitempty"`
}

// RolloutStatus answers the status query.
type RolloutStatus struct {
	Name        string   `json:"name"`
	Phase       string   `json:"phase"` // running | paused | draining | done
	Paused      bool     `json:"paused"`
	Parallelism int      `json:"parallelism"`
	Window      int      `json:"window"`
	Selected    int      `json:"selected"`
	ListingDone bool     `json:"listingDone"`
	Counts      Counts   `json:"counts"`
	Waiting     []string `json:"waiting,omitempty"`
	// WaitingForClusterSlot are nodes whose turn it is, held back by the cluster-wide budget.
	WaitingForClusterSlot []string     `json:"waitingForClusterSlot,omitempty"`
	Recent                []NodeResult `json:"recent,omitempty"`
	Failures              []NodeResult `json:"failures,omitempty"`
	ContinuedAsNew        int          `json:"continuedAsNew"`
	TemplateHash          string       `json:"templateHash"`
	StartedAt             time.Time    `json:"startedAt"`
	// Pacing shows the window, canaries and per-domain in-flight counts of a paced rollout.
	Pacing *PacingStatus `json:"pacing,omitempty"`
	// Gate is the metric gate's state (gates.prometheus); nil without one.
	Gate *GateState `json:"gate,omitempty"`
	// Converge is set while a converging rollout keeps its nodes at its template.
	Converge *ConvergeStatus `json:"converge,omitempty"`
}

// SetParallelismRequest is the input of the setParallelism update.
type SetParallelismRequest struct {
	Parallelism int `json:"parallelism"`
}

// SetParallelismResult is what the update returns.
type SetParallelismResult struct {
	Previous    int `json:"previous"`
	Parallelism int `json:"parallelism"`
}

// DrainPlan is, per node, the Pods a drain would evict, those it would refuse, and the
// PodDisruptionBudgets that allow no disruption now and so would block it.
type DrainPlan struct {
	Node     string   `json:"node"`
	Evict    []string `json:"evict,omitempty"`
	Refused  []string `json:"refused,omitempty"`
	Blocking []string `json:"blockingPDBs,omitempty"`
}

// ApproveRequest is the input of the approve update.
type ApproveRequest struct {
	Note string `json:"note,omitempty"`
}

// ApproveResult is what the approve update returns.
type ApproveResult struct {
	Canaries int `json:"canaries"` // canary nodes that finished before the approval
}

// PacingStatus is the pacing part of the status query.
type PacingStatus struct {
	// WaitingFor is "window", "soak" or "approval" while the rollout holds back for it.
	WaitingFor     string         `json:"waitingFor,omitempty"`
	WindowOpensAt  *time.Time     `json:"windowOpensAt,omitempty"`
	WindowClosesAt *time.Time     `json:"windowClosesAt,omitempty"`
	SoakUntil      *time.Time     `json:"soakUntil,omitempty"`
	CanaryStage    string         `json:"canaryStage,omitempty"`
	Canaries       []string       `json:"canaries,omitempty"`
	DomainKey      string         `json:"domainKey,omitempty"`
	MaxPerDomain   int            `json:"maxPerDomain,omitempty"`
	InFlightByDom  map[string]int `json:"inFlightByDomain,omitempty"`
	Order          string         `json:"order,omitempty"`
}
