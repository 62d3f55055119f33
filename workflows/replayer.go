package workflows

import (
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// BudgetFixtureCluster is the cluster the budgeted replay fixtures (testdata/*budget*.json) were
// recorded on: its budget decides a rollout's commands and its name the coordinator's workflow
// ID, so they are replayed as that cluster's worker runs them.
var BudgetFixtureCluster = Cluster{Name: "fixture-budget", Budget: 2}

// ReplayerFor returns a replayer with every workflow a worker runs, registered as the worker
// that recorded the fixture file ran them.
func ReplayerFor(file string) worker.WorkflowReplayer {
	replayer := worker.NewWorkflowReplayer()
	cluster := Cluster{}
	if strings.Contains(filepath.Base(file), "budget") {
		cluster = BudgetFixtureCluster
	}
	cluster.Register(replayer)
	replayer.RegisterWorkflowWithOptions(FleetRollout, workflow.RegisterOptions{Name: FleetRolloutWorkflow})
	return replayer
}
