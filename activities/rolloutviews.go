package activities

import (
	"context"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
)

// rolloutViewAge is how long one describe of a rollout run may answer the checks of its nodes.
const rolloutViewAge = 5 * time.Second

// rolloutView is what one describe of a rollout run said.
type rolloutView struct {
	at       time.Time
	typ      string
	status   enumspb.WorkflowExecutionStatus
	children map[WorkflowRun]bool // its pending children
	prepared prepared
}

// runOf names a workflow run.
func runOf(id, runID string) WorkflowRun { return WorkflowRun{ID: id, RunID: runID} }

// answers says whether the view settles a node run's check: it lists the node among the
// rollout's pending children (so it was read after the node started), or the rollout run has
// ended, which no later read can undo.
func (v *rolloutView) answers(node WorkflowRun) bool {
	return v.children[node] || v.status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
}

// rolloutViews shares the describes of a rollout run among the lineage checks of its nodes.
// Each node's first write needs a describe of its rollout that lists it; one describe lists
// every node started before it, so the nodes that begin together (a hundred at a rollout's
// start, several in one workflow task as slots free) need one between them, not one each.
// A view answers for rolloutViewAge, so a check rests on a read at most that old, made after
// its node started.
type rolloutViews struct {
	mu   sync.Mutex
	runs map[string]*rolloutLook // by rollout run ID
	// onWait, when set (by a test), is called as a check starts waiting for a describe in flight.
	onWait func()
}

// rolloutLook is a rollout run's latest view and the describe in flight, if any.
type rolloutLook struct {
	view     *rolloutView
	inFlight chan struct{} // closed when the describe in flight returns
}

// view returns a view of the rollout run that answers for node: a fresh one already read, the
// one a describe in flight returns, or one read now.
func (v *rolloutViews) view(ctx context.Context, l *Lineage, rollout WorkflowRun, node WorkflowRun) (*rolloutView, error) {
	for {
		v.mu.Lock()
		look := v.lookOf(rollout.RunID, l.now())
		if w := look.view; w != nil && l.now().Sub(w.at) <= rolloutViewAge && w.answers(node) {
			v.mu.Unlock()
			return w, nil
		}
		if wait := look.inFlight; wait != nil {
			v.mu.Unlock()
			if v.onWait != nil {
				v.onWait()
			}
			select {
			case <-wait: // it may list this node; else the next round reads again
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		look.inFlight = done
		v.mu.Unlock()

		asked := l.now()
		w, err := l.describeRollout(ctx, rollout)
		v.mu.Lock()
		if err == nil {
			w.at = asked
			look.view = w
		}
		look.inFlight = nil
		close(done)
		v.mu.Unlock()
		return w, err // read after this node started: it decides, listed or not
	}
}

// lookOf returns the rollout run's entry, making it; making one drops the entries of runs no
// node has asked about for a minute (rollouts that ended or continued as new).
func (v *rolloutViews) lookOf(runID string, now time.Time) *rolloutLook {
	if look, ok := v.runs[runID]; ok {
		return look
	}
	if v.runs == nil {
		v.runs = map[string]*rolloutLook{}
	}
	for id, look := range v.runs {
		if look.inFlight == nil && (look.view == nil || now.Sub(look.view.at) > time.Minute) {
			delete(v.runs, id)
		}
	}
	look := &rolloutLook{}
	v.runs[runID] = look
	return look
}
