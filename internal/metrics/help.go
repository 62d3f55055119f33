package metrics

import "strings"

// helps are the HELP texts of the series the worker exports: the rollout's own and the
// Temporal SDK's that an operator watches. Others get a generic text naming their source.
var helps = map[string]string{
	"noderollout_nodes":        "Nodes finalized by this worker, by outcome (succeeded, failed, timedOut, skipped, nodeGone).",
	"noderollout_jobs_running": "Jobs this worker is waiting on now.",
	"noderollout_job_duration": "Seconds from a Job's creation to its end.",

	"temporal_request":                                 "gRPC requests the worker sent to Temporal.",
	"temporal_request_failure":                         "gRPC requests to Temporal that failed.",
	"temporal_request_latency":                         "Seconds a gRPC request to Temporal took.",
	"temporal_long_request":                            "Long-poll requests the worker sent to Temporal.",
	"temporal_long_request_failure":                    "Long-poll requests to Temporal that failed.",
	"temporal_long_request_latency":                    "Seconds a long-poll request to Temporal took.",
	"temporal_workflow_completed":                      "Workflow runs this worker completed.",
	"temporal_workflow_failed":                         "Workflow runs this worker failed.",
	"temporal_workflow_canceled":                       "Workflow runs this worker saw canceled.",
	"temporal_workflow_continue_as_new":                "Workflow runs this worker continued as new.",
	"temporal_workflow_endtoend_latency":               "Seconds from a workflow run's start to its close.",
	"temporal_workflow_task_queue_poll_succeed":        "Workflow task polls that returned a task.",
	"temporal_workflow_task_queue_poll_empty":          "Workflow task polls that returned no task.",
	"temporal_workflow_task_execution_failed":          "Workflow tasks that failed (a panic or non-determinism): the workflow is stuck until fixed.",
	"temporal_workflow_task_execution_latency":         "Seconds a workflow task took to run.",
	"temporal_workflow_task_replay_latency":            "Seconds spent replaying history for a workflow task.",
	"temporal_workflow_task_schedule_to_start_latency": "Seconds a workflow task waited in the task queue: high means too few workers.",
	"temporal_activity_execution_failed":               "Activity attempts that failed.",
	"temporal_activity_execution_latency":              "Seconds an activity attempt ran.",
	"temporal_activity_schedule_to_start_latency":      "Seconds an activity task waited in the task queue: high means too few workers or slots.",
	"temporal_activity_succeed_endtoend_latency":       "Seconds from an activity's schedule to its success.",
	"temporal_activity_poll_no_task":                   "Activity task polls that returned no task.",
	"temporal_local_activity_total":                    "Local activities started.",
	"temporal_local_activity_execution_failed":         "Local activity attempts that failed.",
	"temporal_local_activity_execution_latency":        "Seconds a local activity attempt ran.",
	"temporal_worker_start":                            "Times this worker started.",
	"temporal_worker_task_slots_available":             "Free task slots of this worker, by worker type.",
	"temporal_worker_task_slots_used":                  "Used task slots of this worker, by worker type.",
	"temporal_num_pollers":                             "Pollers of this worker, by poller type.",
	"temporal_sticky_cache_size":                       "Workflow runs in the worker's sticky cache.",
	"temporal_sticky_cache_hit":                        "Workflow tasks served from the sticky cache.",
	"temporal_sticky_cache_miss":                       "Workflow tasks that had to replay history (sticky cache miss).",
	"temporal_sticky_cache_total_forced_eviction":      "Workflow runs evicted from a full sticky cache.",
	"temporal_corrupted_signals":                       "Signals dropped because they could not be decoded.",
}

func help(name string) string {
	if h, ok := helps[name]; ok {
		return h
	}
	if strings.HasPrefix(name, "temporal_") {
		return "Temporal Go SDK metric " + name + " (see the SDK's metrics reference)."
	}
	return name
}
