package api

import (
	"time"

	"github.com/noderollout/noderollout/api/didyoumean"
)

// Defaults and limits of RolloutRequest, documented in README's request table.
const (
	DefaultNamespace          = "default"
	DefaultParallelism        = 10
	MaxParallelism            = 1000
	DefaultJobTimeout         = 30 * time.Minute
	MaxJobTimeout             = 7 * 24 * time.Hour
	DefaultJobTTL             = 24 * time.Hour
	DefaultKeepJobs           = KeepFailed
	DefaultContinueAsNewAfter = 2000
	MaxDelayBetweenNodes      = time.Hour
	// MaxExplicitNodes keeps the request well under Temporal's payload limit; larger fleets
	// are selected by label, which is paged.
	MaxExplicitNodes = 5000
	// MaxTemplateBytes bounds the Job template, inline or in its ConfigMap.
	MaxTemplateBytes = 256 * 1024
)

// Growth rules of the launch window.
const (
	GrowthFixed       = "fixed"
	GrowthLinear      = "linear"
	GrowthExponential = "exponential"
)

// RolloutRequest is the input of the Rollout workflow: the public API typed as JSON in the
// Temporal UI, `temporal workflow start --input`, Schedules and `starter start -f`.
type RolloutRequest struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`

	// Exactly one way of choosing nodes: an explicit list, or label and/or field selectors.
	Nodes         []string `json:"nodes,omitempty"`
	NodeSelector  string   `json:"nodeSelector,omitempty"`
	FieldSelector string   `json:"fieldSelector,omitempty"`

	// Exactly one of an inline batch/v1 Job YAML or a ConfigMap holding it.
	JobTemplate    string       `json:"jobTemplate,omitempty"`
	JobTemplateRef *TemplateRef `json:"jobTemplateRef,omitempty"`

	Parallelism int          `json:"parallelism,omitempty"`
	MaxFailures IntOrPercent `json:"maxFailures,omitempty"`
	Batch       *Batch       `json:"batch,omitempty"`
	// Pacing within the rollout (workflows/pacing.go): when nodes may start, how many of one
	// domain at once, which go first, and in what order the rest follow.
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`
	Topology          *Topology          `json:"topology,omitempty"`
	Canary            *Canary            `json:"canary,omitempty"`
	Order             *Order             `json:"order,omitempty"`
	DelayBetweenNodes string             `json:"delayBetweenNodes,omitempty"`
	JobTimeout        string             `json:"jobTimeout,omitempty"`
	JobTTL            string             `json:"jobTTL,omitempty"`
	Rerun             bool               `json:"rerun,omitempty"`
	KeepJobs          string             `json:"keepJobs,omitempty"`
	Owner             *OwnerRef          `json:"owner,omitempty"`
	DryRun            bool               `json:"dryRun,omitempty"`
	Maintenance       *Maintenance       `json:"maintenance,omitempty"`
	// ContinueAsNewAfter bounds how many nodes one workflow run launches before it continues
	// as new, keeping every history short. Rarely worth changing.
	ContinueAsNewAfter int `json:"continueAsNewAfter,omitempty"`

	// legacyProgress is the continue-as-new state that runs before the "field-guarantees"
	// version carried inside the request as "progress". Only a continued run may hold it: a
	// caller who sets it is refused (see Rollout), so it can never skip the template check.
	legacyProgress *Progress
	// parallelismSetToZero tells an explicit 0 (an error) from an omitted field (the default).
	parallelismSetToZero bool

	// decodeProblems collects unknown fields and type mismatches found while decoding: a
	// decoding error would fail the workflow task again and again, so they are reported by
	// validation as a non-retryable InvalidRequest instead.
	decodeProblems []string
	// unknown are the fields the decoding found unknown (see UnknownFields).
	unknown []didyoumean.UnknownField
}

// Batch paces the start: the window of nodes in flight starts at Initial and grows, each time
// a whole window of nodes has succeeded, up to Parallelism.
type Batch struct {
	Initial int    `json:"initial"`
	Growth  string `json:"growth,omitempty"` // fixed (default) | linear | exponential
	// Step is what linear growth adds (default Initial) or exponential growth multiplies by (default 2).
	Step int `json:"step,omitempty"`
}

// IntOrPercent is a count ("3" or 3) or a share of the selected nodes ("10%").
type IntOrPercent string

// TemplateRef names a Job template kept in a ConfigMap.
type TemplateRef struct {
	Namespace string `json:"namespace,omitempty"` // defaults to the rollout's namespace
	Name      string `json:"name"`
	Key       string `json:"key,omitempty"` // defaults to "job.yaml"
}

// OwnerRef is the optional OwnerReference put on every Job, so deleting the owner deletes them.
type OwnerRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}
