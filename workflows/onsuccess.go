package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// markDone applies maintenance.onSuccess to the node after its soak, before its slot frees:
// the labels set, the taints lifted and added, no other key touched.
func (n *nodeSteps) markDone(ctx workflow.Context) error {
	o := n.in.Maintenance.OnSuccess
	if o == nil {
		return nil
	}
	var a *activities.Activities
	setStep(ctx, api.NodeStepOnSuccess, 0, "")
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("marking node `%s` done (maintenance.onSuccess)", n.in.Node))
	return workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, n.writeDeadline(), "mark node "+n.in.Node+" done"), a.MarkNodeDone, activities.MarkNodeInput{
		Rollout: n.in.Rollout, Namespace: n.in.Namespace, Node: n.in.Node, OnSuccess: o,
	}).Get(ctx, nil)
}
