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
	prepared prepared
}

// rolloutViews shares the describes of a rollout run among the lineage checks of its nodes.
// What a check needs of the run (its type, its prepared templates, whether it still runs) is
// the same for every node it started, so one describe answers them all for rolloutViewAge: a
// check rests on a read at most that old. A node started after the read is no less certain
// than one started before it: the run was running when it started the node, later than the
// read. Checks that begin while a describe is in flight wait for it.
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

// view returns a view of the rollout run: a fresh one already read, the one a describe in
// flight returns, or one read now.
func (v *rolloutViews) view(ctx context.Context, l *Lineage, rollout WorkflowRun) (*rolloutView, error) {
	for {
		v.mu.Lock()
		look := v.lookOf(rollout.RunID, l.now())
		if w := look.view; w != nil && l.now().Sub(w.at) <= rolloutViewAge {
			v.mu.Unlock()
			return w, nil
		}
		if wait := look.inFlight; wait != nil {
			v.mu.Unlock()
			if v.onWait != nil {
				v.onWait()
			}
			select {
			case <-wait: // a failed describe leaves no view: the next round reads again
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
		return w, err
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
