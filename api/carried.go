package api

import (
	"time"
)

// Progress is what one run of Rollout hands to the next when it continues as new: internal
// state, passed as the workflow's second argument and honoured only in a run that was
// continued as new, never a field of the public request.
type Progress struct {
	// Template is the template text, carried only by runs from before templates were stored
	// by reference (TemplateHash names the stored copy).
	Template     string `json:"template,omitempty"`
	TemplateHash string `json:"templateHash"`
	// RebootTemplateHash and CheckTemplateHash name the stored templates of the reboot Job
	// (maintenance.reboot) and the check Job (gates.checkJob), when the request has them.
	RebootTemplateHash string       `json:"rebootTemplateHash,omitempty"`
	CheckTemplateHash  string       `json:"checkTemplateHash,omitempty"`
	Cursor             string       `json:"cursor,omitempty"` // last node handled, in name order
	ListingDone        bool         `json:"listingDone,omitempty"`
	Selected           int          `json:"selected"` // nodes selected so far (all of them once listing is done)
	Counts             Counts       `json:"counts"`
	Failures           []NodeResult `json:"failures,omitempty"` // the first MaxReportedFailures
	Parallelism        int          `json:"parallelism"`
	Window             int          `json:"window"`
	Paused             bool         `json:"paused,omitempty"`
	ContinuedAsNew     int          `json:"continuedAsNew,omitempty"`
	StartedAt          time.Time    `json:"startedAt"`
	// Replaced: the previous run was a converging rollout that this run's request replaced
	// (UpdateReplace). Only Paused and LastStartAt carry over; the rest starts afresh.
	Replaced bool `json:"replaced,omitempty"`
	// LastStartAt is when the rollout last started a node's child (delayBetweenNodes spaces
	// the starts from it, across continue-as-new); nil before the first.
	LastStartAt *time.Time `json:"lastStartAt,omitempty"`
	// MaxParallelism is the worker policy's cap when the rollout started (0: none).
	MaxParallelism int `json:"maxParallelism,omitempty"`
	// Pacing is the pacing state of a request that paces (windows, domains, canaries, order).
	Pacing *PacingProgress `json:"pacing,omitempty"`
	// WaitingNodes are the nodes another rollout held when the previous run handed them over
	// (versionHandOverWaiting); this run waits for them first.
	WaitingNodes []PacedNode `json:"waitingNodes,omitempty"`
	// InFlightNodes are the nodes whose child workflows the previous run left running when it
	// continued as new (versionHandOverInFlight): each tells the rollout when it ends, and
	// this run counts them in its window until then.
	InFlightNodes []InFlightNode `json:"inFlightNodes,omitempty"`
	// UndoTemplateHash names the stored undo template of a request with
	// maintenance.onFailure undo.
	UndoTemplateHash string `json:"undoTemplateHash,omitempty"`
	// TaintCheck is what each listing checks the nodes' taints with; nil: no check.
	TaintCheck *TaintCheck `json:"taintCheck,omitempty"`
	// Gate is the metric gate's state (gates.prometheus).
	Gate *GateState `json:"gate,omitempty"`
	// Converge is a converging rollout's state (mode: converge).
	Converge *ConvergeProgress `json:"converge,omitempty"`
	// Listing is where the node listing stands in the API server's paginated list, so that
	// the next slice resumes there instead of reading every page up to the cursor again.
	Listing *ListingPosition `json:"listing,omitempty"`
}

// PacingProgress is the pacing state carried across continue-as-new.
type PacingProgress struct {
	// Queue is the listed page not yet handled: reordering and per-domain limits start nodes
	// out of name order, so the cursor alone cannot say which are left.
	Queue       []PacedNode `json:"queue,omitempty"`
	CanaryStage string      `json:"canaryStage,omitempty"`
	CanaryNodes []string    `json:"canaryNodes,omitempty"`
	// PassedOverCanaries are the canaries that did not run in the canary stage: blocked by
	// their Pods or carrying an untolerated taint (versionPassedOverCanaryStops).
	PassedOverCanaries []string `json:"passedOverCanaries,omitempty"`
}

// InFlightNode is a node handed over while its child workflow runs: the child's run, to be
// told apart from a later child of the same node.
type InFlightNode struct {
	Name   string `json:"name"`
	Domain string `json:"domain,omitempty"`
	RunID  string `json:"runID"`
}

// PacedNode is a listed node with what pacing needs of it.
type PacedNode struct {
	Name   string `json:"name"`
	Skip   string `json:"skip,omitempty"`
	Domain string `json:"domain,omitempty"`
	Rank   string `json:"rank,omitempty"`
	// Reason says more of a skip (the untolerated taint).
	Reason string `json:"reason,omitempty"`
}

// ListingPosition holds the continue tokens of the current slice of the node listing. Marks
// are the tokens of the pages that held the slice, each with the first name it held, so that
// a run that continued as new before handling the whole slice resumes from its cursor's page;
// Next lies right after End, the slice's last name, and serves once the cursor reached it.
// Tokens are the API server's and opaque; one that expired is replaced by the activity
// (activities.ListNodesInput.Continue).
type ListingPosition struct {
	Marks []ListingMark `json:"marks,omitempty"`
	Next  string        `json:"next,omitempty"`
	End   string        `json:"end,omitempty"`
}

// ListingMark is a page of the node listing: the continue token that read it ("" for the
// first page) and the first selected name it held.
type ListingMark struct {
	Continue string `json:"continue,omitempty"`
	First    string `json:"first"`
}

// ResumeToken is the continue token from which to list the names after cursor ("" for the
// first page): right after the slice when the cursor reached its end, else the page that
// holds the cursor, else the slice's first page.
func (l *ListingPosition) ResumeToken(cursor string) string {
	if l == nil {
		return ""
	}
	if l.Next != "" && l.End != "" && cursor == l.End {
		return l.Next
	}
	token := ""
	for i, m := range l.Marks {
		if i == 0 || m.First <= cursor {
			token = m.Continue
		}
	}
	return token
}
