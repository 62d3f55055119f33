package workflows

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/noderollout/noderollout/api"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// BudgetFixtureCluster is the cluster the budgeted replay fixtures (testdata/*budget*.json) were
// recorded on: its budget decides a rollout's commands and its name the coordinator's workflow
// ID, so they are replayed as that cluster's worker runs them.
var BudgetFixtureCluster = api.Cluster{Name: "fixture-budget", Budget: 2}

// ReplayerFor returns a replayer with every workflow a worker runs, registered as the worker
// that recorded the fixture file ran them.
func ReplayerFor(file string) worker.WorkflowReplayer {
	replayer := worker.NewWorkflowReplayer()
	OnCluster{fixtureCluster(file)}.Register(replayer)
	replayer.RegisterWorkflowWithOptions(FleetRollout, workflow.RegisterOptions{Name: api.FleetRolloutWorkflow})
	return replayer
}

func fixtureCluster(file string) api.Cluster {
	if strings.Contains(filepath.Base(file), "budget") {
		return BudgetFixtureCluster
	}
	return api.Cluster{}
}

// ReplayFixture replays a recorded history file as the worker that recorded it ran it. A node
// workflow's history is replayed under the node's workflow ID, which the file does not hold
// (older servers did not record it in the history) and the node workflow checks (checkLineage).
func ReplayFixture(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	history, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return err
	}
	var options worker.ReplayWorkflowHistoryOptions
	if started := history.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes(); started != nil {
		if slices.Contains(api.NodeWorkflowTypes, started.GetWorkflowType().GetName()) {
			// Servers of today record the ID in the history; the node's input named the node
			// until NodeRolloutV5, which takes it from the ID.
			options.OriginalExecution.ID = started.GetWorkflowId()
			if options.OriginalExecution.ID == "" {
				var in NodeRolloutInput
				if err := converter.GetDefaultDataConverter().FromPayloads(started.GetInput(), &in); err != nil {
					return err
				}
				options.OriginalExecution.ID = fixtureCluster(file).NodeWorkflowID(in.Node)
			}
		}
	}
	return ReplayerFor(file).ReplayWorkflowHistoryWithOptions(nil, history, options)
}
