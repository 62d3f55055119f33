package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// prepareStepTemplates loads, checks and stores the templates of the node's second Jobs (the
// reboot Job, the check Job) as prepare does the rollout's own, before any node starts, and
// keeps their hashes in the carried progress. No GetVersion: only requests with these sections
// schedule the activities, and no history recorded before they existed has them.
func (r *rollout) prepareStepTemplates(ctx workflow.Context) error {
	var a *activities.Activities
	store := r.features.guarantees && !r.req.DryRun
	prepare := func(what, inline string, ref *api.TemplateRef) (string, error) {
		var prepared activities.PreparedTemplate
		err := workflow.ExecuteActivity(withAPIActivity(ctx, "load and check the "+what+" Job template"), a.PrepareTemplate, activities.PrepareTemplateInput{
			Namespace:   r.settings.Namespace,
			Template:    inline,
			TemplateRef: ref,
			Store:       store,
			Parallelism: r.settings.Parallelism,
		}).Get(ctx, &prepared)
		return prepared.Hash, asWorkflowError(err)
	}
	if m := r.req.Maintenance; m != nil && m.Reboot != nil {
		hash, err := prepare("reboot", m.Reboot.JobTemplate, m.Reboot.JobTemplateRef)
		if err != nil {
			return err
		}
		r.progress.RebootTemplateHash = hash
	}
	if g := r.req.Gates; g != nil && g.CheckJob != nil {
		hash, err := prepare("check", g.CheckJob.JobTemplate, g.CheckJob.JobTemplateRef)
		if err != nil {
			return err
		}
		r.progress.CheckTemplateHash = hash
	}
	return nil
}

// nodeMaintenance is the maintenance a node receives: the settings' with the step templates'
// hashes. A copy, so the settings stay as the request made them.
func (r *rollout) nodeMaintenance() *api.NodeMaintenance {
	nm := r.settings.Maintenance
	if nm == nil || (nm.Reboot == nil && nm.CheckJob == nil) {
		return nm
	}
	c := *nm
	if nm.Reboot != nil {
		reboot := *nm.Reboot
		reboot.TemplateHash = r.progress.RebootTemplateHash
		c.Reboot = &reboot
	}
	if nm.CheckJob != nil {
		check := *nm.CheckJob
		check.TemplateHash = r.progress.CheckTemplateHash
		c.CheckJob = &check
	}
	return &c
}

// onSuccessOf is the onSuccess section of the maintenance, if any.
func onSuccessOf(nm *api.NodeMaintenance) *api.OnSuccess {
	if nm == nil {
		return nil
	}
	return nm.OnSuccess
}

// stepTemplateHashes are the hashes of the step templates the rollout prepared.
func (r *rollout) stepTemplateHashes() []string {
	var hashes []string
	for _, h := range []string{r.progress.RebootTemplateHash, r.progress.CheckTemplateHash} {
		if h != "" {
			hashes = append(hashes, h)
		}
	}
	return hashes
}

// recordTerminated writes the failure of a node whose workflow was terminated on the Node. A
// maintained node records its Job's success when the Job ends, before its reboot, health gate,
// soak and uncordon; terminated in one of those, it would keep that success (and our cordon),
// and a re-run would skip it as done. Another node's marker keeps what it said before its
// run, which a converging rollout reads as a node to run now, retryFailedAfter or not (the
// model test found it). Written here, a re-run covers the node as any failed one, and a
// converging rollout retries it only as retryFailedAfter says. Only terminated children take
// this path, hence the marker's place. Before versionRecordTerminatedNode the rollout wrote
// nothing; until this change it asked only for a maintained node (a history without the
// marker replays the same either way).
func (r *rollout) recordTerminated(ctx workflow.Context, node string, result api.NodeResult) {
	if workflow.GetVersion(ctx, versionRecordTerminatedNode, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	var a *activities.Activities
	end := activities.JobEnd{Outcome: result.Outcome, Reason: result.Reason, Message: result.Message}
	err := workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, 10*time.Minute, "record terminated node "+node), a.FinalizeJob, activities.FinalizeInput{
		Rollout:      r.req.Name,
		Node:         node,
		TemplateHash: r.templateHashOf(node),
		End:          end,
		KeepJobs:     r.settings.KeepJobs,
		Requester:    r.requester,
		RunID:        workflow.GetInfo(ctx).WorkflowExecution.RunID,
	}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("the failure of a terminated node's workflow could not be recorded on the Node", "node", node, "error", err)
	}
}
