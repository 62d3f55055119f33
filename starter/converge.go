package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/noderollout/noderollout/api"
)

// Converging rollouts in the starter: start of a running converging rollout's name with a new
// request hands it over (UpdateReplace), and status shows what it keeps.

// replaceConverging hands the running converging rollout id over to req: it lets its nodes in
// flight end and continues as new with req, whose run moves every node to the new template.
func (a *app) replaceConverging(tc client.Client, id string, req api.RolloutRequest) error {
	handle, err := tc.UpdateWorkflow(a.ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   api.UpdateReplace,
		Args:         []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res api.ReplaceResult
	if err == nil {
		err = handle.Get(a.ctx, &res)
	}
	if err != nil {
		return notReplaced(req.Name, err)
	}
	// A paused rollout's replacing run starts paused too: say so, or the operator waits for a
	// move that will not come until resumed.
	var st api.RolloutStatus
	if v, err := tc.QueryWorkflow(a.ctx, id, "", api.QueryStatus); err != nil || v.Get(&st) != nil {
		st = api.RolloutStatus{} // the replace went through; only the hint is lost
	}
	return a.print(res, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "rollout %s: replacing template %s; once its nodes in flight end, a new run moves every node to the new template (starter status %s)\n",
			req.Name, res.PreviousTemplateHash, req.Name)
		if err == nil && st.Paused {
			_, err = fmt.Fprintf(w, "rollout %s is paused, and the new run starts paused: starter resume %s\n", req.Name, req.Name)
		}
		return err
	})
}

// convergeLine is the status line of a converging rollout.
func convergeLine(c *api.ConvergeStatus, hash string) string {
	if len(hash) > 12 {
		hash = hash[:12]
	}
	last := "none yet"
	if !c.LastChange.IsZero() {
		last = c.LastChange.UTC().Format(time.RFC3339)
	}
	line := fmt.Sprintf("%d nodes at template %s, %d pending, last change %s", c.AtTemplate, hash, c.Pending, last)
	if c.Replacing {
		line += " (being replaced)"
	}
	return line
}

// notReplaced explains a refused replace. A rollout that is not converging has no replace
// update: the server's "unknown update" is said in the starter's words.
func notReplaced(name string, err error) error {
	if strings.Contains(err.Error(), "unknown update") {
		return fmt.Errorf("rollout %s is running and does not converge, so it cannot be replaced: wait for it to end (starter status %s -w) or abort it (starter abort %s --wait), then start again", name, name, name)
	}
	return fmt.Errorf("rollout %s is running and could not be replaced: %w", name, err)
}
