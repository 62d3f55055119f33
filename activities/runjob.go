package activities

import (
	"context"

	"github.com/noderollout/noderollout/api"
)

// RunJobInput asks for a node's whole Job, start to finish, within one local activity.
type RunJobInput struct {
	Job JobRequest `json:"job"`
	// WatchSeconds bounds the watch: a Job still running then is left to WaitJob.
	WatchSeconds   int64        `json:"watchSeconds"`
	TimeoutSeconds int64        `json:"timeoutSeconds"` // the Job's deadline, from its creation
	KeepJobs       api.KeepJobs `json:"keepJobs"`
	// UndoOf is FinalizeInput.UndoOf: the rollout an undo rollout's node undoes.
	UndoOf string `json:"undoOf,omitempty"`
	// Trim: the result's Job reference leaves out what the request says (JobRef.TrimmedOf), and
	// a finalized Job's reference is left out whole, as the node's history records the result
	// (NodeRolloutV5).
	Trim bool `json:"trim,omitempty"`
}

// RunJobResult is how far RunJob got. Done: the Job ended and was finalized, End and Fin are
// the node's outcome. Running: the Job outlasted the watch, or the watch failed, and WaitJob
// takes over. Neither with an End: the Job ended but finalize failed, and runs again on its own.
// Job.Finalized: this run had finished the node before, and nothing was created.
type RunJobResult struct {
	Job     JobRef         `json:"job,omitzero"`
	Running bool           `json:"running,omitempty"`
	End     JobEnd         `json:"end"`
	Done    bool           `json:"done,omitempty"`
	Fin     FinalizeResult `json:"fin,omitzero"`
}

// RunJob is CreateJob, WatchJob for at most WatchSeconds, and FinalizeJob, in one local
// activity: a short Job then costs its node one marker in its history instead of three. Only
// the create's errors fail it, so a retry (or a repeat of the workflow task) starts over at a
// create, which adopts the Job or finds the run's outcome on the Node; a later step that fails
// returns how far it got, and the workflow goes on from there with the step on its own.
func (a *Activities) RunJob(ctx context.Context, in RunJobInput) (RunJobResult, error) {
	res, err := a.runJob(ctx, in)
	switch {
	case in.Trim && res.Done:
		res.Job = JobRef{} // finalized: the workflow needs no more of it than its name, which it planned
	case in.Trim:
		res.Job = res.Job.TrimmedOf(PlannedJob(in.Job))
	}
	return res, err
}

func (a *Activities) runJob(ctx context.Context, in RunJobInput) (RunJobResult, error) {
	job, node, err := a.createJobOnNode(ctx, in.Job)
	if err != nil || job.Finalized != "" {
		return RunJobResult{Job: job}, err
	}
	watch, err := a.WatchJob(ctx, WatchJobInput{
		WaitJobInput: WaitJobInput{Job: job, TimeoutSeconds: in.TimeoutSeconds},
		ForSeconds:   in.WatchSeconds,
	})
	if ctx.Err() != nil {
		return RunJobResult{}, ctx.Err() // an abort: the workflow deletes the Job
	}
	if err != nil || watch.Running {
		return RunJobResult{Job: job, Running: true}, nil
	}
	fin, err := a.FinalizeJob(ctx, FinalizeInput{
		Rollout:      in.Job.Rollout,
		Node:         in.Job.Node,
		TemplateHash: in.Job.TemplateHash,
		Job:          &job,
		End:          watch.End,
		KeepJobs:     in.KeepJobs,
		Requester:    in.Job.Requester,
		RunID:        in.Job.RunID,
		UndoOf:       in.UndoOf,
		nodeAtCreate: node,
	})
	if ctx.Err() != nil {
		return RunJobResult{}, ctx.Err()
	}
	return RunJobResult{Job: job, End: watch.End, Done: err == nil, Fin: fin}, nil
}
