package api

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/noderollout/noderollout/api/didyoumean"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FleetRequest is the input of FleetRollout.
type FleetRequest struct {
	Name string `json:"name"`
	// Waves are the clusters, by the `cluster` name of their worker: each wave starts when the
	// one before it has ended, its clusters all at once (e.g. [["staging"], ["eu", "us"]]).
	Waves [][]string `json:"waves"`
	// MaxFailedClusters is the fleet's failure budget: once more clusters than this have
	// failed, no further wave starts.
	MaxFailedClusters int `json:"maxFailedClusters,omitempty"`
	// TaskQueue is the clusters' workers' task queue before the cluster qualifies it.
	TaskQueue string `json:"taskQueue,omitempty"`
	// Rollout is what every cluster runs; its name defaults to the fleet's.
	Rollout RolloutRequest `json:"rollout"`

	// decodeProblems are what UnmarshalJSON found wrong, for validation to report as
	// RolloutRequest's are; decodeFailed says the fleet's own fields did not decode.
	decodeProblems []string
	decodeFailed   bool
	// unknown are the fields the decoding found unknown (see UnknownFields).
	unknown []didyoumean.UnknownField
}

// UnknownFields are the fleet request's unknown fields, its own and then its rollout's (see
// RolloutRequest.UnknownFields).
func (r FleetRequest) UnknownFields() []didyoumean.UnknownField {
	return append(slices.Clip(r.unknown), r.Rollout.unknown...)
}

type fleetRequestFields FleetRequest

// OnlyLenientDecodingFailed says the request has problems that only the lenient decoding
// finds (unknown fields, a rollout field of the wrong type), which encoding/json alone, as
// fleets decoded before versionFleetUnknownFields, let through.
func (r FleetRequest) OnlyLenientDecodingFailed() bool {
	return len(r.decodeProblems) > 0 && !r.decodeFailed
}

// ForgetDecodeProblems drops the decoding's problems, as runs before versionFleetUnknownFields
// did not see them.
func (r *FleetRequest) ForgetDecodeProblems() { r.decodeProblems = nil }

// UnmarshalJSON decodes leniently like RolloutRequest's, naming unknown fields at any depth
// and the nested rollout's fields by their full path (rollout.batch.inital).
func (r *FleetRequest) UnmarshalJSON(b []byte) error {
	raw, problems := jsonObject(b, "")
	rollout, hasRollout := raw["rollout"]
	// Decoded on its own below, so that its problems are named once, under rollout.
	delete(raw, "rollout")
	var fields fleetRequestFields
	decoded, unknown := decodeFields(raw, &fields, "")
	problems = append(problems, decoded...)
	fields.unknown = unknown
	if hasRollout {
		fields.Rollout = decodeRolloutRequest(rollout, "rollout.")
		problems = append(problems, fields.Rollout.decodeProblems...)
		fields.Rollout.decodeProblems = nil
	}
	fields.decodeProblems = problems
	// Before this decoder, encoding/json alone failed the run at once on a request that is no
	// object or has a fleet field of the wrong type; FleetRollout needs no version for those.
	fields.decodeFailed = json.Unmarshal(b, &fleetRequestFields{}) != nil
	*r = FleetRequest(fields)
	return nil
}

// Cluster states in a fleet rollout.
const (
	ClusterPending   = "pending"
	ClusterRunning   = "running"
	ClusterSucceeded = "succeeded"
	ClusterFailed    = "failed"
	ClusterAborted   = "aborted"
	ClusterNotRun    = "notRun" // a later wave, not started once the fleet stopped
)

// ClusterRollout is one cluster's part of a fleet rollout.
type ClusterRollout struct {
	Cluster    string  `json:"cluster"`
	Wave       int     `json:"wave"` // from 1
	WorkflowID string  `json:"workflowID"`
	TaskQueue  string  `json:"taskQueue"`
	State      string  `json:"state"`
	Counts     *Counts `json:"counts,omitempty"`
	Message    string  `json:"message,omitempty"`
}

// FleetStatus answers the fleet's status query; FleetResult is what it returns.
type FleetStatus struct {
	Name              string           `json:"name"`
	Phase             string           `json:"phase"` // running | paused | draining | done
	Paused            bool             `json:"paused"`
	Wave              int              `json:"wave"` // the wave running or last run, from 1
	Waves             int              `json:"waves"`
	FailedClusters    int              `json:"failedClusters"`
	MaxFailedClusters int              `json:"maxFailedClusters"`
	Clusters          []ClusterRollout `json:"clusters"`
}

type FleetResult = FleetStatus

// Problems is everything wrong with the fleet request: its own fields (OwnProblems), then
// the rollout every cluster runs (RolloutProblems).
func (r FleetRequest) Problems() []*FieldError {
	return append(r.OwnProblems(), r.RolloutProblems()...)
}

// OwnProblems are the problems of the fleet's own fields.
func (r FleetRequest) OwnProblems() []*FieldError {
	ps := decodeFieldErrors(r.decodeProblems)
	if errs := validation.IsDNS1123Label(r.Name); len(errs) > 0 {
		ps.add("name", fmt.Sprintf("%q is not a DNS-1123 label", r.Name), "name the fleet rollout like \"kata-deploy\"")
	}
	if len(r.Waves) == 0 {
		ps.add("waves", "is empty", `list the clusters in waves, e.g. [["staging"], ["eu", "us"]]`)
	}
	seen := map[string]bool{}
	for w, wave := range r.Waves {
		if len(wave) == 0 {
			ps.add(fmt.Sprintf("waves[%d]", w), "is empty", "remove the empty wave")
		}
		for i, c := range wave {
			field := fmt.Sprintf("waves[%d][%d]", w, i)
			switch {
			case len(validation.IsDNS1123Label(c)) > 0:
				ps.add(field, fmt.Sprintf("%q is not a cluster name", c), "use the `cluster` its worker is configured with (a DNS-1123 label)")
			case seen[c]:
				ps.add(field, fmt.Sprintf("cluster %q is listed twice", c), "list each cluster in one wave only")
			}
			seen[c] = true
		}
	}
	if r.MaxFailedClusters < 0 {
		ps.add("maxFailedClusters", "is negative", "use 0 (stop at the first failed cluster) or more")
	}
	return ps
}

// RolloutProblems are the problems of the rollout every cluster runs, each named by its path
// in the fleet's request (rollout.parallelism).
//
// All of the rollout's Problems apply at fleet level: what depends on the cluster (the
// namespace and the template's ConfigMap existing, the template itself, the worker's
// maxParallelism, the time zone, the nodes a selector matches) only each cluster's Rollout can
// check, with I/O, and Problems leaves it out. An empty name is no problem: the fleet fills in
// its own (WithDefaults), checked as name.
func (r FleetRequest) RolloutProblems() []*FieldError {
	var out problems
	for _, p := range r.Rollout.Problems() {
		if p.Field == "name" && r.Rollout.Name == "" {
			continue
		}
		out.add("rollout."+p.Field, p.Problem, p.Fix)
	}
	if r.Rollout.Converging() {
		// A converging rollout ends only when aborted or replaced: the next wave would never start.
		out.add("rollout.mode", "is converge, which never ends, so the fleet's next wave would never start",
			"use mode: once in a fleet; to keep clusters converged, start a converging rollout on each cluster with `starter start`")
	}
	return out
}

// WithDefaults is the request with its defaults applied: the rollout named after the fleet, the
// default task queue.
func (r FleetRequest) WithDefaults() FleetRequest {
	if r.Rollout.Name == "" {
		r.Rollout.Name = r.Name
	}
	if r.TaskQueue == "" {
		r.TaskQueue = TaskQueue
	}
	return r
}
