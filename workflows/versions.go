package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// The version ledger. Workflow code must make, on replay, the commands its history recorded,
// so every change to what a running workflow does is asked with workflow.GetVersion: a history
// recorded before the change has no marker and takes the older branch (DefaultVersion), a run
// started after it records the marker and takes the new one. This file lists every change ID
// and node workflow type: what changed, since when, which fixture in testdata replays each
// branch, and when the older branch can go. versions_test.go fails when code asks a change ID
// that is not listed here, and checks every fixture named here records what it is said to.
//
// Most IDs are asked only on the path they change, so that no other history carries their
// marker (a marker costs an event and a search-attribute upsert per workflow): such a branch
// is pinned by a fixture only if one was recorded on that path.
//
// Changes that need no ID, because no recorded history can take their path: the metric gate
// (metricgate.go) makes commands only for a request with gates.prometheus, a field no history
// recorded before it has; the taint check (taints.go) changes no command, only ListNodes' and
// CheckNodes' input, and checks only when the recorded PrepareTemplate result says it read the
// tolerations (a recorded CheckNodes result from before has no untolerated nodes to skip); a
// maintained node records its own success after its uncordon (maintenance.go) only when its
// input says NodeRolloutInput.RecordNodeEnd, which no child recorded before it was given
// (v13-node-maintained.json replays without that command, v14-node-maintained.json with it);
// a setParallelism accepted while a converging rollout is being replaced is kept in the
// pending replacement (steering.go), which changes only the continue-as-new input, and replay
// does not compare inputs.

// Change IDs, by the workflow that asks them.
const (
	// Rollout, at its start (startFeatures), in this order.
	versionFieldGuarantees = "field-guarantees"
	versionNodeV2          = "node-v2"
	versionChildCollector  = "one-child-collector"
	// Rollout, once its template is prepared (readAtRun), in this order.
	versionHistoryLimits    = "continue-as-new-near-history-limits"
	versionStopWaits        = "stop-waits-when-no-node-may-start"
	versionAdmission        = "one-admission-point"
	versionHandOverInFlight = "hand-over-nodes-in-flight"
	// Rollout, as it continues as new.
	versionReadWordsBeforeCAN = "read-words-before-continue-as-new"
	// Rollout, each on its own path.
	versionClusterBudget    = "cluster-budget"
	versionCanaryOwnNodes   = "canary-selector-own-nodes"
	versionHandOverWaiting  = "hand-over-waiting-nodes"
	versionCutDelay         = "cut-delay-when-no-node-may-start"
	versionCapBeforePrepare = "set-parallelism-waits-for-the-cap"
	versionConverge         = "converge-mode"
	// Rollout, when a replacement is pending as the run decides how it ends.
	versionReplacementTakesOver = "replacement-takes-over"
	// Rollout, when a pause and a resume reach it together.
	versionPauseWinsTogether = "pause-wins-when-words-come-together"
	// Rollout, when a canary did not run in the canary stage (blocked, untolerated taint).
	versionPassedOverCanaryStops = "passed-over-canary-stops-the-rollout"
	// Rollout, when a maintained node's workflow was terminated.
	versionRecordTerminatedNode = "record-terminated-node"
	// Rollout, when a node handed over in flight is found ended without its word.
	versionHandedInLost = "handed-node-ended-without-word"
	// Rollout, when a word names a run of one of its nodes other than its child's.
	versionWordOfAnotherRun = "word-of-another-run"
	// NodeRollout (versionFieldGuarantees, at its start), and every node type on its path.
	versionRecordAbortInFinalize = "record-abort-in-finalize"
	versionAbortDuringUncordon   = "abort-during-uncordon"
	versionRecordAbortAfterJob   = "record-abort-after-job"
	versionTellLateWaiters       = "tell-late-waiters"
	// Every node type, at a maintained node's reboot or check Job.
	versionStepCreateAwaitsAbort = "step-job-create-awaits-abort"
	// ClusterBudget.
	versionBudgetRebuild = "budget-rebuilds-holders"
	// FleetRollout.
	versionFleetUnknownFields          = "fleet-refuses-unknown-fields"
	versionFleetChecksRollout          = "fleet-checks-nested-rollout"
	versionFleetCountsUnrolledClusters = "fleet-counts-aborted-and-empty-clusters"
	versionFleetPauseWinsTogether      = "fleet-pause-wins-when-words-come-together"
)

// change is one GetVersion change ID.
type change struct {
	id       string
	workflow string // the workflow type that asks it
	since    string // the commit that brought it
	// what each version does, from DefaultVersion up; asked says when the ID is asked at all.
	what  []string
	asked string
	// pinned names, by version, the fixtures in testdata whose replay takes that branch; a
	// branch no fixture reaches names the tests that cover it instead (covered).
	pinned  map[workflow.Version][]string
	covered string
	// removable is when the older branches (and their fixtures) can go.
	removable string
}

// removableOnceDrained is when a branch taken only by workflows that started before a change
// can go: once no such workflow can still run or be replayed (the namespace's retention after
// the last of them closed), and the fixtures of that branch go with it.
const removableOnceDrained = "once no workflow started before it can still be open or replayed (the namespace's retention after the last closed)"

// ledger is every change ID that workflow code asks.
var ledger = []change{
	{
		id: versionFieldGuarantees, workflow: "Rollout, NodeRollout", since: "2bbf0f0 (2026-11-30)",
		what: []string{
			"Rollout: the template travels in the history; a busy node is retried on a timer; no budget check while a node waits. NodeRollout: node_legacy.go, whose writes stop retrying after a minute",
			"Rollout: the template is stored by hash and only the hash travels; busy nodes are told when the node frees; the failure budget is checked while a node waits. NodeRollout: runNode, whose writes retry until the node's deadline",
		},
		asked: "every Rollout and NodeRollout run, at its start",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"rollout-abort.json", "rollout-busy-node-holder.json", "rollout-busy-node-waits.json", "rollout-continue-as-new-run1.json", "rollout-continue-as-new-run2.json", "rollout-continue-as-new-run3.json", "rollout-history.json", "rollout-pause-resume-set-parallelism.json", "node-cancelled-mid-job.json", "node-history.json", "node-succeeded.json"},
			1:                       {"guarantees-rollout-abort.json", "guarantees-rollout-busy-node-holder.json", "guarantees-rollout-busy-node-waits.json", "guarantees-rollout-continue-as-new-run1.json", "guarantees-rollout-continue-as-new-run2.json", "guarantees-rollout-continue-as-new-run3.json", "guarantees-rollout-pause-resume-set-parallelism.json", "guarantees-node-cancelled-mid-job.json", "guarantees-node-succeeded.json", "paced-node-maintained.json", "paced-rollout-canary-approved.json"},
		},
		removable: removableOnceDrained + "; with it go node_legacy.go, withLegacyLocalAPIActivity and the busy-node backoff",
	},
	{
		id: versionNodeV2, workflow: "Rollout", since: "acdd35f (2026-11-30)",
		what: []string{
			"children are NodeRollout, which ask field-guarantees themselves",
			"children are NodeRolloutV2: no marker of their own; a short Job is watched within the child's first workflow task (WatchSeconds)",
			"children are NodeRolloutV3: that Job is created, watched and finalized by one local activity (RunJob)",
			"children are NodeRolloutV4: a Job that outlasts RunJob's watch is awaited by AwaitJobEnd, which the worker's Job informer completes when the Job ends, instead of the heartbeating WaitJob",
			"children are NodeRolloutV5: NodeRolloutV4 with a smaller history; the child's input and summary leave out the node, which its workflow ID names, and its watch, which it keeps unless maintained (since 2026-12-05)",
		},
		asked: "every Rollout run with field-guarantees, at its start",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"guarantees-rollout-abort.json", "guarantees-rollout-continue-as-new-run1.json"},
			1:                       {"v2-rollout-abort.json", "v2-rollout-busy-node-holder.json", "v2-rollout-busy-node-waits.json", "v2-rollout-canary-approved.json", "v2-rollout-continue-as-new-run1.json", "v2-rollout-continue-as-new-run2.json", "v2-rollout-continue-as-new-run3.json", "v2-rollout-pause-resume-set-parallelism.json"},
			2:                       {"v3-rollout-abort.json", "v3-rollout-budgeted.json", "v3-rollout-busy-node-holder.json", "v3-rollout-busy-node-waits.json", "v3-rollout-canary-approved.json", "v3-rollout-continue-as-new-run1.json", "v3-rollout-continue-as-new-run2.json", "v3-rollout-continue-as-new-run3.json", "v3-rollout-pause-resume-set-parallelism.json"},
			3:                       {"v9-rollout-abort.json", "v9-rollout-budgeted.json", "v9-rollout-busy-node-holder.json", "v9-rollout-busy-node-waits.json", "v9-rollout-canary-approved.json", "v9-rollout-continue-as-new-run1.json", "v9-rollout-continue-as-new-run2.json", "v9-rollout-continue-as-new-run3.json", "v9-rollout-cut-delay.json", "v9-rollout-hand-over-run1.json", "v9-rollout-hand-over-run2.json", "v9-rollout-pause-resume-set-parallelism.json"},
			4:                       {"v13-rollout-abort.json", "v13-rollout-budgeted.json", "v13-rollout-busy-node-holder.json", "v13-rollout-busy-node-waits.json", "v13-rollout-canary-approved.json", "v13-rollout-continue-as-new-run1.json", "v13-rollout-continue-as-new-run2.json", "v13-rollout-continue-as-new-run3.json", "v13-rollout-cut-delay.json", "v13-rollout-hand-over-run1.json", "v13-rollout-hand-over-run2.json", "v13-rollout-in-flight-run1.json", "v13-rollout-in-flight-run2.json", "v13-rollout-pause-resume-set-parallelism.json", "v13-rollout-word-in-the-decision-task.json"},
		},
		removable: removableOnceDrained + "; the node types NodeRollout, NodeRolloutV2 and NodeRolloutV3 stay registered until their own histories are gone too",
	},
	{
		id: versionChildCollector, workflow: "Rollout", since: "d1cec14 (2026-12-01)",
		what: []string{
			"a coroutine per node in flight waits on its child",
			"one coroutine (childCollector) waits on every child that started at once",
		},
		asked: "every Rollout run with field-guarantees, at its start",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"v3-rollout-abort.json", "v3-rollout-continue-as-new-run1.json"},
			1:                       {"v4-rollout-abort.json", "v4-rollout-budgeted.json", "v4-rollout-busy-node-holder.json", "v4-rollout-busy-node-waits.json", "v4-rollout-canary-approved.json", "v4-rollout-continue-as-new-run1.json", "v4-rollout-continue-as-new-run2.json", "v4-rollout-continue-as-new-run3.json", "v4-rollout-pause-resume-set-parallelism.json"},
		},
		removable: removableOnceDrained,
	},
	{
		id: versionHistoryLimits, workflow: "Rollout", since: "e4ac290 (2026-11-30)",
		what: []string{
			"the run continues as new when the server suggests it (about 4,096 events)",
			"the run continues as new near the history's warning limits (9,000 events or 8 MiB, less what its drain adds)",
		},
		asked: "every Rollout run that starts nodes, once its template is prepared",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"rollout-history.json"},
			1:                       {"rollout-abort.json", "rollout-continue-as-new-run1.json", "guarantees-rollout-abort.json", "v5-rollout-abort.json"},
		},
		removable: removableOnceDrained,
	},
	{
		id: versionStopWaits, workflow: "Rollout", since: "30b4fbd (2026-12-02)",
		what: []string{
			"a wait for the maintenance window, for a busy node or between nodes runs its course after the failure budget is spent or a canary failed",
			"those waits end as soon as no node may start any more",
		},
		asked: "every Rollout run that starts nodes, once its template is prepared",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"v4-rollout-abort.json", "v4-rollout-continue-as-new-run1.json"},
			1:                       {"v5-rollout-abort.json", "v5-rollout-budgeted.json", "v5-rollout-busy-node-holder.json", "v5-rollout-busy-node-waits.json", "v5-rollout-canary-approved.json", "v5-rollout-continue-as-new-run1.json", "v5-rollout-continue-as-new-run2.json", "v5-rollout-continue-as-new-run3.json", "v5-rollout-pause-resume-set-parallelism.json", "v6-rollout-cut-delay.json", "v6-rollout-hand-over-run1.json", "v6-rollout-hand-over-run2.json"},
		},
		removable: removableOnceDrained,
	},
	{
		id: versionAdmission, workflow: "Rollout", since: "715ea05 (2026-12-02)",
		what: []string{
			"each wait checks the rules it waits for (startNext, runNode): a wait for one rule may return into a start that another refuses",
			"every node start passes startRefusal at the instant it starts (admission.go); long waits watch the history's size; the canary stage can continue as new",
			"as 1, but the run picks a node only once every coroutine ready in the workflow task has run (afterReadyCoroutines): a pause, a handed-over node's failure or a budget grant delivered in the same task as the timer the run woke from (as when the worker was away while both happened) counts before the node starts, where 1 started nodes on the state before them; and an abort gives back a cluster slot granted in its own task, where 1 kept it until the coordinator's reclaim (since 2026-12-07)",
			"as 2, but delayBetweenNodes is a rule of startRefusal (refusedTooSoon): no child starts sooner than the delay after the last start (Progress.LastStartAt, carried across continue-as-new), where 2 spaced only the launches, so nodes that waited for cluster slots, for a busy node or across continue-as-new started together with later ones (since 2026-12-07)",
		},
		asked: "every Rollout run that starts nodes, once its template is prepared",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"v5-rollout-abort.json", "v6-rollout-cut-delay.json", "v6-rollout-hand-over-run1.json"},
			1:                       {"v8-rollout-abort.json", "v8-rollout-budgeted.json", "v8-rollout-busy-node-holder.json", "v8-rollout-busy-node-waits.json", "v8-rollout-canary-approved.json", "v8-rollout-continue-as-new-run1.json", "v8-rollout-continue-as-new-run2.json", "v8-rollout-continue-as-new-run3.json", "v8-rollout-cut-delay.json", "v8-rollout-hand-over-run1.json", "v8-rollout-hand-over-run2.json", "v8-rollout-pause-resume-set-parallelism.json"},
			2:                       {"v15-rollout-abort.json", "v15-rollout-budgeted.json", "v15-rollout-busy-node-holder.json", "v15-rollout-busy-node-waits.json", "v15-rollout-canary-approved.json", "v15-rollout-continue-as-new-run1.json", "v15-rollout-continue-as-new-run2.json", "v15-rollout-continue-as-new-run3.json", "v15-rollout-cut-delay.json", "v15-rollout-hand-over-run1.json", "v15-rollout-hand-over-run2.json", "v15-rollout-in-flight-run1.json", "v15-rollout-in-flight-run2.json", "v15-rollout-pause-resume-set-parallelism.json"},
			3:                       {"v16-rollout-abort.json", "v16-rollout-budgeted.json", "v16-rollout-busy-node-holder.json", "v16-rollout-busy-node-waits.json", "v16-rollout-canary-approved.json", "v16-rollout-continue-as-new-run1.json", "v16-rollout-continue-as-new-run2.json", "v16-rollout-continue-as-new-run3.json", "v16-rollout-cut-delay.json", "v16-rollout-hand-over-run1.json", "v16-rollout-hand-over-run2.json", "v16-rollout-in-flight-run1.json", "v16-rollout-in-flight-run2.json", "v16-rollout-pause-resume-set-parallelism.json", "v16-rollout-spaced-starts.json"},
		},
		covered:   "TestModel runs versions 0 (NODEROLLOUT_MODEL_BEFORE) and 3 (its spacing check fails 87 of the first 1,000 seeds on version 2); TestAPauseInTheTaskOfTheDelayTimerHoldsTheNextNode, TestAPauseInTheTaskOfTheWindowOpeningHoldsTheNodes, TestAHandedInFailureInTheTaskOfTheDelayTimerStopsTheRollout and TestASlotGrantedInTheTaskOfTheAbortIsGivenBack fail on version 1; TestNodesGrantedClusterSlotsTogetherStartADelayApart and TestTheDelayAfterTheLastStartCarriesOverContinueAsNew fail on version 2, and so does the e2e recording of v16-rollout-spaced-starts.json (its children started 10.9 s apart under a 20 s delay), which pins the spacing wait",
		removable: removableOnceDrained + "; with it go startNext, runNode's pre-admission loop and awaitLaunchSlot",
	},
	{
		id: versionHandOverInFlight, workflow: "Rollout", since: "6026932 (2026-12-03)",
		what: []string{
			"children close with their run (request-cancel); a run that continues as new first waits for every node in flight",
			"children outlive their run (abandon, without a cluster-wide budget and not converging); a run that continues as new waits for its children until the youngest is past its first task's watch (a run of short Jobs drains as before), then asks each child in flight to tell the rollout when it ends (notifyWhenFree, answered by nodeFree with the result) and hands the nodes to the next run (Progress.InFlightNodes), which counts them in its window, cancels them on an abort and asks again on the busy-node recheck (handover.go)",
			"as 1, but each child started to outlive its run is told the rollout at its start (NodeRolloutInput.TellWhenFree), so a run that continues as new hands its children over at once, without asking them or waiting for them to age (no drain for short Jobs either); a child's word that reaches the run before its end makes the run wait for that end (since 2026-12-04)",
			"as 2, but a child started once the run can no longer continue as new on its count (its launches plus its queue reach continueAsNewAfter with the listing done: the last window of the last run) neither outlives the run nor is told, so it does not signal a run that ends by waiting for it (since 2026-12-05)",
		},
		asked: "once per run, at the first child that may still run when the run continues as new on its count (launched + parallelism > continueAsNewAfter), where children can be handed over (no cluster-wide budget, not converging)",
		pinned: map[workflow.Version][]string{
			// v10 runs that never reach the ask (they cannot continue as new on their count
			// while a child they start still runs) record no marker and drain, as before.
			workflow.DefaultVersion: {"v9-rollout-abort.json", "v9-rollout-budgeted.json", "v9-rollout-busy-node-holder.json", "v9-rollout-busy-node-waits.json", "v9-rollout-canary-approved.json", "v9-rollout-continue-as-new-run1.json", "v9-rollout-continue-as-new-run2.json", "v9-rollout-continue-as-new-run3.json", "v9-rollout-cut-delay.json", "v9-rollout-hand-over-run1.json", "v9-rollout-hand-over-run2.json", "v9-rollout-pause-resume-set-parallelism.json", "v10-rollout-abort.json", "v10-rollout-budgeted.json", "v10-rollout-busy-node-holder.json", "v10-rollout-busy-node-waits.json", "v10-rollout-canary-approved.json", "v10-rollout-continue-as-new-run3.json", "v10-rollout-cut-delay.json", "v10-rollout-pause-resume-set-parallelism.json"},
			1:                       {"v10-rollout-continue-as-new-run1.json", "v10-rollout-continue-as-new-run2.json", "v10-rollout-hand-over-run1.json", "v10-rollout-hand-over-run2.json", "v10-rollout-in-flight-run1.json", "v10-rollout-in-flight-run2.json"},
			2:                       {"v11-rollout-continue-as-new-run1.json", "v11-rollout-continue-as-new-run2.json", "v11-rollout-hand-over-run1.json", "v11-rollout-hand-over-run2.json", "v11-rollout-in-flight-run1.json", "v11-rollout-in-flight-run2.json"},
			3:                       {"v12-rollout-continue-as-new-run1.json", "v12-rollout-continue-as-new-run2.json", "v12-rollout-hand-over-run1.json", "v12-rollout-hand-over-run2.json", "v12-rollout-in-flight-run1.json", "v12-rollout-in-flight-run2.json"},
		},
		covered:   "v10-rollout-in-flight-run*.json replay the asked hand-over, v11-rollout-in-flight-run*.json the told one (its second run tells its last window too), v12-rollout-in-flight-run2.json a last window left untold; TestModel hands nodes over in flight (a stand-in carries each on in the next run's environment, and the model fails a node handed over that was neither told nor asked); TestShortJobsDrainAndLongJobsAreHandedOver; TestAWordBeforeItsChildsEndKeepsTheNodeInItsRun; TestTheLastWindowIsToldOnlyWhileTheRunMayContinue runs versions 2 and 3 side by side",
		removable: removableOnceDrained,
	},
	{
		id: versionReadWordsBeforeCAN, workflow: "Rollout", since: "this change (2026-12-05)",
		what: []string{
			"a run continues as new once its signal channels are empty and its handlers done: a child's word handed straight to the waiting signal reader in the task of the decision is read only after the run has handed that node over, so the next run hears of it at its busy-node recheck, ten minutes on",
			"the run first lets every coroutine ready in that task run (afterReadyCoroutines), so the reader reads such a word and the run waits for that child's end, as for any word before its end",
		},
		asked: "every Rollout run that continues as new, as it does",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"v13-rollout-word-in-the-decision-task.json"},
			1:                       {"v13-rollout-continue-as-new-run1.json", "v13-rollout-continue-as-new-run2.json", "v13-rollout-hand-over-run1.json", "v13-rollout-in-flight-run1.json"},
		},
		covered:   "TestAWordHandedToTheWaitingReaderIsReadBeforeTheRunGoesOn shows the hand-off and the wait; v13-rollout-word-in-the-decision-task.json is a run of the e2e suite that lost such a word",
		removable: removableOnceDrained,
	},
	{
		id: versionClusterBudget, workflow: "Rollout", since: "28234f8 (2026-11-30)",
		what: []string{
			"no node takes a slot of the cluster-wide budget",
			"each node takes a slot from the cluster's ClusterBudget coordinator before its child starts",
		},
		asked: "only on a worker with a cluster budget (cluster-budget > 0), at the run's start",
		pinned: map[workflow.Version][]string{
			1: {"v3-rollout-budgeted.json", "v4-rollout-budgeted.json", "v5-rollout-budgeted.json", "v8-rollout-budgeted.json"},
		},
		covered:   "DefaultVersion is every run on a worker without a budget, which never asks; TestClusterBudgetHoldsAcrossTwoRollouts runs version 1",
		removable: removableOnceDrained,
	},
	{
		id: versionCanaryOwnNodes, workflow: "Rollout", since: "7dacc3a (2026-12-02)",
		what: []string{
			"canary.selector on a rollout that names its nodes fails when it matches more than 100 nodes of the cluster",
			"the listing pages on through the selector's matches and counts only the rollout's own nodes",
		},
		asked:     "only when canary.selector on a rollout that names its nodes matches more than one page",
		covered:   "no fixture reaches the path; TestCanarySelectorCountsOnlyTheRolloutsOwnNodes runs version 1",
		removable: removableOnceDrained,
	},
	{
		id: versionHandOverWaiting, workflow: "Rollout", since: "bc96496 (2026-12-02)",
		what: []string{
			"a run waits for every node another rollout holds before it ends or continues as new",
			"once nothing else is in flight, a run that continues as new, or nears its history limits, hands those nodes to the next run (Progress.WaitingNodes)",
		},
		asked: "only when a draining run finds nodes waiting for another rollout",
		pinned: map[workflow.Version][]string{
			1: {"v6-rollout-hand-over-run1.json", "v8-rollout-hand-over-run1.json"},
		},
		covered:   "DefaultVersion: no fixture reaches the path; TestContinuingRunHandsOverANodeAnotherRolloutHolds runs version 1",
		removable: removableOnceDrained,
	},
	{
		id: versionCutDelay, workflow: "Rollout", since: "5fd95c3 (2026-12-02)",
		what: []string{
			"delayBetweenNodes runs its course after no node may start any more",
			"the delay ends at once then",
		},
		asked: "only when a delay between nodes is cut short",
		pinned: map[workflow.Version][]string{
			1: {"v6-rollout-cut-delay.json", "v8-rollout-cut-delay.json"},
		},
		covered:   "DefaultVersion: TestOverBudgetRolloutOfAnOldRunSitsTheDelayOut",
		removable: removableOnceDrained,
	},
	{
		id: versionCapBeforePrepare, workflow: "Rollout", since: "715ea05 (2026-12-02)",
		what: []string{
			"a setParallelism update before the template is prepared is applied unchecked",
			"it waits for the worker's cap (policy maxParallelism) and is refused over it",
		},
		asked:     "only by a setParallelism update that arrives before the template is prepared",
		covered:   "no fixture reaches the path; TestSetParallelismBeforeTheTemplateIsPreparedStaysWithinThePolicy runs version 1, TestModel (modelBefore) the default",
		removable: removableOnceDrained,
	},
	{
		id: versionConverge, workflow: "Rollout", since: "converge branch (2026-12-02)",
		what: []string{
			"never taken: no rollout converged before it (mode: converge is refused by older workers as an unknown field)",
			"mode: converge: after the first pass the run waits for nodes-changed signals, checks those nodes (CheckNodes) and runs them through the admission point; onDeselect; retryFailedAfter (a timer for the earliest due retry; failed, timedOut, drainTimedOut, unhealthy, rebootTimedOut, checkFailed and blocked nodes: api.RetriedByConverge); replace hands over by continue-as-new. The last two outcomes and the taint skip joined version 1 before any converging rollout ran outside this repository's tests (the converge branch had not landed), so they need no ID of their own",
		},
		asked: "only by a converging rollout, once its template is prepared",
		pinned: map[workflow.Version][]string{
			1: {"v17-rollout-converge-replaced.json"},
		},
		covered:   "TestConvergeRunsNodesJoiningAtEveryStepAcrossContinueAsNew and TestConvergeReplacementHandsOverWithoutRunningANodeTwiceAtOnce run version 1 further",
		removable: "never: it is the baseline of converge mode, for its later changes",
	},
	{
		id: versionReplacementTakesOver, workflow: "Rollout", since: "replacement-takes-over (2026-12-07)",
		what: []string{
			"a replaced converging rollout kept to its canary stage's soak and approval, ended CanaryFailed (or on a broken metric gate, or a listing error) without handing over the replacement it had accepted, and handed over without its pause",
			"the replacement takes over whatever else ends the run: the soak's timer is cancelled and the approval no longer awaited; the hand-over reads the words that came with it first and carries the pause and the last start's time (Progress.Replaced)",
		},
		asked: "only with a replacement pending, where the run decides how it ends (canary stage, metric gate or listing error, the hand-over)",
		pinned: map[workflow.Version][]string{
			1: {"v17-rollout-converge-replaced.json"},
		},
		covered:   "DefaultVersion: TestAReplacementEndsTheCanaryStagesWait; version 1 also TestAReplacementTakesOverFromAFailedCanary, TestAReplacementTakesOverFromABrokenMetricGate and TestAPauseHoldsTheReplacingRun",
		removable: removableOnceDrained,
	},
	{
		id: versionPauseWinsTogether, workflow: "Rollout", since: "pause-wins-when-words-come-together (2026-12-07)",
		what: []string{
			"pauses and resumes waiting together (they came in one workflow task after its first word) were read pause first, then resume: after pause, resume, pause the run went on",
			"the run reads them all and stays paused, since which was sent last is lost",
		},
		asked: "only when a pause and a resume are both waiting to be read",
		pinned: map[workflow.Version][]string{
			1: {"v18-rollout-words-together.json"},
		},
		covered:   "DefaultVersion: TestPausesAndResumesThatComeTogetherOnTheOldVersion; version 1 also TestPausesAndResumesThatComeTogether; the model sends words in bursts",
		removable: removableOnceDrained,
	},
	{
		id: versionPassedOverCanaryStops, workflow: "Rollout", since: "passed-over-canary-stops-the-rollout (2026-12-07)",
		what: []string{
			"a canary that did not run (blocked by its Pods, or skipped for a taint the Job does not tolerate) counted as skipped, and the canary stage passed without it: with every canary passed over the rollout went on to every node on the word of none",
			"such a canary stops the rollout after the canary stage, as a failed one does (CanaryFailed), naming the canaries not run",
		},
		asked: "only when a canary did not run in the canary stage",
		pinned: map[workflow.Version][]string{
			1: {"v19-rollout-canary-not-run.json"},
		},
		covered:   "DefaultVersion: TestABlockedCanaryOnTheOldVersionWasPassedOver; version 1 also TestABlockedCanaryStopsTheRollout and TestACanaryWithAnUntoleratedTaintStopsTheRollout; the model blocks canaries (gates.blockingPods)",
		removable: removableOnceDrained,
	},
	{
		id: versionRecordTerminatedNode, workflow: "Rollout", since: "record-terminated-node (2026-12-06)",
		what: []string{
			"a maintained node whose workflow was terminated keeps on the Node the success its Job recorded, and our cordon; a re-run skips it as done",
			"the rollout records the node failed (NodeWorkflowTerminated) on the Node with a FinalizeJob local activity, so a re-run covers it; since handed-node-ended-without-word every terminated node, not only a maintained one: a converging rollout ran another again at once, retryFailedAfter or not",
		},
		asked:     "only when a node workflow ends terminated (until handed-node-ended-without-word, only in a rollout with a maintenance section; a history without the marker replays the same)",
		covered:   "no fixture reaches the path; the e2e TestTerminatedMaintainedNodeIsRecordedFailed runs version 1",
		removable: removableOnceDrained,
	},
	{
		id: versionHandedInLost, workflow: "Rollout", since: "handed-node-ended-without-word (2026-12-06)",
		what: []string{
			"a node handed over in flight whose workflow was terminated runs again at the busy-node recheck, or counts aborted at an abort; a rollout that stops first leaves a maintained node's Job success on the Node, and a re-run skips the node as done",
			"it is settled failed (NodeWorkflowTerminated) like the run's own terminated child, and a maintained node's failure is written on the Node (versionRecordTerminatedNode)",
		},
		asked:     "only when the busy-node recheck or an abort finds a handed-over node workflow ended without its word; a worker's word for it (activities.TerminatedNodeNotifier, usually first) settles it failed through handedInEnded on either branch, asking nothing",
		covered:   "no fixture reaches the path; the model test (TestModel) terminates handed-over node workflows at version 1",
		removable: removableOnceDrained,
	},
	{
		id: versionWordOfAnotherRun, workflow: "Rollout", since: "957d665 (2026-12-07)",
		what: []string{
			"a word for a node this run's child holds is taken as the child's, whatever run it names: a worker's bare word for an earlier run of the node, terminated by hand, made the run wait for its child's whole Job before it continued as new",
			"a word that names another run is not the child's: the run hands the node over as it would without it",
		},
		asked:     "only when a word names a run of a node other than the run's child holding it (a word without a run, or one that comes before the child is known started, is taken as the child's and asks nothing)",
		covered:   "no fixture reaches the path; TestAWordForAnEarlierRunDoesNotHoldTheHandOver runs both versions, TestModel (stray words) version 1",
		removable: removableOnceDrained,
	},
	{
		id: versionRecordAbortInFinalize, workflow: "NodeRollout, NodeRolloutV2, NodeRolloutV3, NodeRolloutV4, NodeRolloutV5", since: "7557946 (2026-12-02)",
		what: []string{
			"an abort during the finalize of a succeeded Job may leave the success on the Node",
			"the abort is recorded over it, so a rerun covers the node",
		},
		asked:     "only when an abort cuts short the finalize of a succeeded Job",
		covered:   "no fixture reaches the path; TestMaintenanceAbortAtEachStep runs version 1, TestModel (modelBefore) the default",
		removable: removableOnceDrained,
	},
	{
		id: versionAbortDuringUncordon, workflow: "NodeRollout, NodeRolloutV2, NodeRolloutV3, NodeRolloutV4, NodeRolloutV5", since: "7557946 (2026-12-02)",
		what: []string{
			"an abort during the final uncordon fails the node with the cancelled uncordon as an API error",
			"the node ends aborted, its cordon left as onFailure says and the abort recorded",
		},
		asked:     "only when an abort cuts short the uncordon after a success",
		covered:   "no fixture reaches the path; TestMaintenanceAbortAtEachStep runs version 1, TestModel (modelBefore) the default",
		removable: removableOnceDrained,
	},
	{
		id: versionStepCreateAwaitsAbort, workflow: "NodeRollout, NodeRolloutV2, NodeRolloutV3, NodeRolloutV4, NodeRolloutV5", since: "this change (2026-12-07)",
		what: []string{
			"an abort while the reboot or check Job is created resolves the create at once, while its attempt runs on until its next heartbeat: the workflow drops the Job by its planned name, and the attempt may create it after that drop (the node reboots after the abort, the Job outlives the node workflow)",
			"the create is scheduled with WaitForCancellation: an abort waits until the attempt has stopped, then drops the Job it may have made",
		},
		asked:     "once per node workflow, at its first reboot or check Job",
		covered:   "no fixture has a reboot or check Job; TestAbortDuringAStepJobCreateAwaitsTheCreate runs version 1, TestRebootIfRequested, TestRebootResumesAfterACrash and TestCheckJobFailureFailsTheNode run it without an abort",
		removable: removableOnceDrained,
	},
	{
		id: versionRecordAbortAfterJob, workflow: "NodeRollout, NodeRolloutV2, NodeRolloutV3, NodeRolloutV4, NodeRolloutV5", since: "2f470d9 (2026-12-02)",
		what: []string{
			"an abort in the health gate or soak leaves the Job's success on the Node",
			"the abort is recorded over it",
		},
		asked:     "only when an abort comes in the health gate or soak after a succeeded Job",
		covered:   "no fixture reaches the path; TestMaintenanceAbortAtEachStep",
		removable: removableOnceDrained,
	},
	{
		id: versionTellLateWaiters, workflow: "NodeRollout, NodeRolloutV2, NodeRolloutV3, NodeRolloutV4, NodeRolloutV5", since: "this change (2026-12-03)",
		what: []string{
			"a rollout that asks to be told while the node's words to its waiters are on their way is never told: it waits for its busy-node recheck (10 minutes)",
			"the requests are read again once the words are out, and each new waiter is told",
		},
		asked:     "only when a rollout asked while the words to the earlier waiters were on their way",
		covered:   "no fixture reaches the path (a race on the real stack); TestAWaiterThatAsksWhileTheWordsAreOutIsTold",
		removable: removableOnceDrained,
	},
	{
		id: versionBudgetRebuild, workflow: "ClusterBudget", since: "1e7a83c (2026-12-02)",
		what: []string{
			"a coordinator started afresh grants from an empty table",
			"it first takes every node workflow still running on its task queue as a holder",
		},
		asked: "by a coordinator started afresh (not continued as new)",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"v3-budget-coordinator.json", "v4-budget-coordinator.json"},
			1:                       {"v8-budget-coordinator.json", "v9-budget-coordinator.json"},
		},
		removable: removableOnceDrained,
	},
	{
		id: versionFleetUnknownFields, workflow: "FleetRollout", since: "31c38ca (2026-12-02)",
		what: []string{
			"fields the lenient decoding found unknown, or a rollout field of the wrong type, are dropped silently",
			"they fail the fleet with InvalidRequest",
		},
		asked:     "only by a fleet whose request has such fields",
		covered:   "no fixture reaches the path; TestFleetUnknownFieldsAreRefusedByPath runs version 1, TestFleetUnknownFieldsAreDroppedOnTheOldVersion the default",
		removable: removableOnceDrained,
	},
	{
		id: versionFleetChecksRollout, workflow: "FleetRollout", since: "e39f172 (2026-12-02)",
		what: []string{
			"a statically invalid rollout is started in wave 1's clusters, to fail there one by one",
			"it fails the fleet at once with InvalidRequest",
		},
		asked: "only by a fleet whose rollout has problems",
		pinned: map[workflow.Version][]string{
			1: {"v7-fleet-invalid-rollout.json", "v8-fleet-invalid-rollout.json", "v9-fleet-invalid-rollout.json"},
		},
		covered:   "DefaultVersion: TestFleetStartsAnInvalidRolloutOnTheOldVersion and TestFleetRefusesAConvergingRollout",
		removable: removableOnceDrained,
	},
	{
		id: versionFleetCountsUnrolledClusters, workflow: "FleetRollout", since: "bef32c2 (2026-12-02)",
		what: []string{
			"a cluster whose rollout was aborted on its own, or selected no node, is not counted against maxFailedClusters",
			"it is",
		},
		asked: "every valid fleet, once it starts its waves",
		pinned: map[workflow.Version][]string{
			workflow.DefaultVersion: {"v3-fleet-two-waves.json", "v4-fleet-two-waves.json"},
			1:                       {"v8-fleet-two-waves.json", "v9-fleet-two-waves.json"},
		},
		removable: removableOnceDrained,
	},
	{
		id: versionFleetPauseWinsTogether, workflow: "FleetRollout", since: "pause-wins-when-words-come-together (2026-12-07)",
		what: []string{
			"pauses and resumes waiting together (they came while the fleet passed a word on to its clusters, or in one workflow task after its first word) were read pause first, then resume: the fleet and its clusters went on whichever was sent last",
			"the fleet reads them all, stays paused and passes the pause on",
		},
		asked:     "only when a pause and a resume are both waiting to be read",
		covered:   "no fixture reaches the path; TestFleetPausesAndResumesThatComeTogether runs both versions",
		removable: removableOnceDrained,
	},
}

// nodeType is one node workflow type: a Rollout starts one per node as its child, of the
// type its version of node-v2 says.
type nodeType struct {
	name     string
	what     string
	fixtures []string // node histories of this type in testdata
}

// nodeTypes are the node workflow types every worker registers.
var nodeTypes = []nodeType{
	{
		name: api.NodeRolloutWorkflow,
		what: "children of Rollout runs from before node-v2; asks field-guarantees itself: node_legacy.go without it, runNode with it",
		fixtures: []string{"node-cancelled-mid-job.json", "node-history.json", "node-succeeded.json",
			"guarantees-node-cancelled-mid-job.json", "guarantees-node-succeeded.json", "paced-node-maintained.json"},
	},
	{
		name:     api.NodeRolloutV2Workflow,
		what:     "children of runs with node-v2 version 1: runNode with a local watch of a short Job, no marker of its own",
		fixtures: []string{"v2-node-cancelled-mid-job.json", "v2-node-maintained.json", "v2-node-succeeded.json"},
	},
	{
		name: api.NodeRolloutV3Workflow,
		what: "children of runs with node-v2 version 2: a short Job created, watched and finalized by one RunJob local activity",
		fixtures: []string{"v3-node-cancelled-mid-job.json", "v3-node-maintained.json", "v3-node-succeeded.json",
			"v4-node-cancelled-mid-job.json", "v4-node-maintained.json", "v4-node-succeeded.json",
			"v8-node-cancelled-mid-job.json", "v8-node-maintained.json", "v8-node-succeeded.json"},
	},
	{
		name: api.NodeRolloutV4Workflow,
		what: "children of runs with node-v2 version 3: NodeRolloutV3 whose Job, once it outlasts RunJob's watch, is awaited by AwaitJobEnd (completed by the worker's Job informer) instead of WaitJob",
		fixtures: []string{"v9-node-awaited-long-job.json", "v9-node-cancelled-while-awaiting.json", "v9-node-cancelled-mid-job.json",
			"v9-node-maintained.json", "v9-node-succeeded.json", "v11-node-handed-over.json", "v11-node-succeeded.json"},
	},
	{
		name: api.NodeRolloutV5Workflow,
		what: "children of runs with node-v2 version 4 (today's): NodeRolloutV4 with a smaller history; its node comes from its workflow ID, its RunJob result leaves out what its input says (all of the Job's reference once it is finalized), its RunJob marker has no summary, its result leaves out the node and sub-millisecond time",
		fixtures: []string{"v13-node-awaited-long-job.json", "v13-node-cancelled-mid-job.json", "v13-node-cancelled-while-awaiting.json",
			"v13-node-handed-over.json", "v13-node-maintained.json", "v13-node-succeeded.json", "v14-node-maintained.json"},
	},
}

// features are what a Rollout run does, by the versions its history recorded.
type features struct {
	guarantees  bool             // versionFieldGuarantees
	nodeVersion workflow.Version // versionNodeV2: 0 starts NodeRollout, 1 NodeRolloutV2, 2 NodeRolloutV3, 3 NodeRolloutV4, 4 NodeRolloutV5
	collect     bool             // versionChildCollector
	// Asked once the template is prepared (readAtRun); a dry run never asks them.
	atHistoryLimits bool // versionHistoryLimits: continue as new near the limits, not when suggested
	stopWaits       bool // versionStopWaits
	admission       bool // versionAdmission
	// admitAfterReady (versionAdmission 2): the run lets every coroutine ready in a workflow
	// task run before it picks a node, and an abort gives back a slot granted in its task.
	admitAfterReady bool
	// spaceStarts (versionAdmission 3): delayBetweenNodes is a rule of startRefusal, so a node
	// that waited (for a cluster slot, for a busy node) starts no sooner after the last start.
	spaceStarts bool
	// handOverInFlight (versionHandOverInFlight, asked by childOutlivesRun at the first child
	// that may still run when the run continues as new): from then on children outlive their run,
	// and the run may hand them to the next instead of waiting for them.
	handOverInFlight, handOverAsked bool
	// tellAtStart (versionHandOverInFlight 2): those children are told the rollout at their
	// start, so the run hands them over without asking them or waiting for them to age.
	tellAtStart bool
	// outliveOnlyBeforeCount (versionHandOverInFlight 3): a child started once the run can no
	// longer continue as new on its count neither outlives it nor is told.
	outliveOnlyBeforeCount bool
}

// startFeatures asks the versions every run asks at its start, in the order their markers
// stand in the history.
func startFeatures(ctx workflow.Context) features {
	var f features
	f.guarantees = workflow.GetVersion(ctx, versionFieldGuarantees, workflow.DefaultVersion, 1) == 1
	if f.guarantees {
		f.nodeVersion = workflow.GetVersion(ctx, versionNodeV2, workflow.DefaultVersion, 4)
		f.collect = workflow.GetVersion(ctx, versionChildCollector, workflow.DefaultVersion, 1) == 1
	}
	return f
}

// readAtRun asks the versions a run asks once its template is prepared, before it starts
// nodes.
func (f *features) readAtRun(ctx workflow.Context) {
	f.atHistoryLimits = workflow.GetVersion(ctx, versionHistoryLimits, workflow.DefaultVersion, 1) == 1
	f.stopWaits = workflow.GetVersion(ctx, versionStopWaits, workflow.DefaultVersion, 1) == 1
	admission := workflow.GetVersion(ctx, versionAdmission, workflow.DefaultVersion, 3)
	f.admission, f.admitAfterReady, f.spaceStarts = admission >= 1, admission >= 2, admission >= 3
}
