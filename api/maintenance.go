package api

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Maintenance is the request's per-node maintenance: the node is taken out of service before
// its Job (cordon, drain), and its slot frees only once it is healthy again (health, soak).
type Maintenance struct {
	// Cordon marks the node unschedulable before the Job and, if we cordoned it, schedulable
	// again after the node succeeded.
	Cordon bool `json:"cordon,omitempty"`
	// Drain evicts the node's Pods before the Job (and implies cordon).
	Drain *Drain `json:"drain,omitempty"`
	// Health must hold after the Job succeeded; soak alone checks Ready=True.
	Health *HealthGate `json:"health,omitempty"`
	// Soak is how long the node must stay healthy before its slot frees ("2m").
	Soak string `json:"soak,omitempty"`
	// OnFailure is what a node that did not succeed (or was aborted) is left as:
	// keepCordoned (default) or uncordon. Either way only our own cordon is ever undone.
	OnFailure string `json:"onFailure,omitempty"`
}

// Drain evicts through the Eviction API, so PodDisruptionBudgets are honoured.
type Drain struct {
	Timeout            string `json:"timeout,omitempty"`     // default 10m; then the node is drainTimedOut
	PodSelector        string `json:"podSelector,omitempty"` // only these Pods
	DeleteEmptyDirData bool   `json:"deleteEmptyDirData,omitempty"`
	// Force evicts Pods that no controller manages too (kubectl drain --force): nothing makes
	// them again elsewhere. Without it such a Pod stops the drain before any eviction.
	Force       bool   `json:"force,omitempty"`
	GracePeriod string `json:"gracePeriod,omitempty"` // overrides the Pods' own
}

// HealthGate names the Node conditions that must hold, and how long they may take to.
type HealthGate struct {
	Timeout    string            `json:"timeout,omitempty"`    // default 10m
	Conditions map[string]string `json:"conditions,omitempty"` // default {"Ready": "True"}
}

// Defaults and limits of the maintenance section.
const (
	OnFailureKeepCordoned = "keepCordoned"
	OnFailureUncordon     = "uncordon"
	DefaultDrainTimeout   = 10 * time.Minute
	DefaultHealthTimeout  = 10 * time.Minute
	maxMaintenanceStep    = 24 * time.Hour
	maxGracePeriod        = time.Hour
)

// NodeMaintenance is the validated maintenance section as a child receives it.
type NodeMaintenance struct {
	Cordon               bool              `json:"cordon,omitempty"`
	Drain                bool              `json:"drain,omitempty"`
	DrainTimeoutSeconds  int64             `json:"drainTimeoutSeconds,omitempty"`
	PodSelector          string            `json:"podSelector,omitempty"`
	DeleteEmptyDirData   bool              `json:"deleteEmptyDirData,omitempty"`
	Force                bool              `json:"force,omitempty"`
	GracePeriodSeconds   *int64            `json:"gracePeriodSeconds,omitempty"`
	Health               bool              `json:"health,omitempty"`
	HealthTimeoutSeconds int64             `json:"healthTimeoutSeconds,omitempty"`
	Conditions           map[string]string `json:"conditions,omitempty"`
	SoakSeconds          int64             `json:"soakSeconds,omitempty"`
	UncordonOnFailure    bool              `json:"uncordonOnFailure,omitempty"`
}

// checkMaintenance validates the section; nodeMaintenance reads it with defaults applied.
func checkMaintenance(m *Maintenance) []*FieldError {
	_, ps := readMaintenance(m)
	return ps
}

// nodeMaintenance is the section as children get it; nil when the request has none. Call it on
// a validated request.
func ResolveMaintenance(m *Maintenance) *NodeMaintenance {
	nm, _ := readMaintenance(m)
	return nm
}

func readMaintenance(m *Maintenance) (*NodeMaintenance, []*FieldError) {
	if m == nil {
		return nil, nil
	}
	var ps []*FieldError
	add := func(field, what, fix string) { ps = append(ps, Problem(field, what, fix)) }
	nm := &NodeMaintenance{Cordon: m.Cordon || m.Drain != nil}
	if d := m.Drain; d != nil {
		nm.Drain = true
		nm.DrainTimeoutSeconds = seconds(parseDuration(d.Timeout, DefaultDrainTimeout, time.Second, maxMaintenanceStep, "maintenance.drain.timeout", add))
		if d.PodSelector != "" {
			//workflowcheck:ignore
			if _, err := labels.Parse(d.PodSelector); err != nil {
				add("maintenance.drain.podSelector", fmt.Sprintf("%q does not parse: %v", d.PodSelector, err), "write a label selector such as \"app=web\", or omit it to evict every Pod")
			}
		}
		nm.PodSelector = d.PodSelector
		nm.DeleteEmptyDirData = d.DeleteEmptyDirData
		nm.Force = d.Force
		if d.GracePeriod != "" {
			g := seconds(parseDuration(d.GracePeriod, 0, 0, maxGracePeriod, "maintenance.drain.gracePeriod", add))
			nm.GracePeriodSeconds = &g
		}
	}
	soak := parseDuration(m.Soak, 0, 0, maxMaintenanceStep, "maintenance.soak", add)
	nm.SoakSeconds = seconds(soak)
	if m.Health != nil || soak > 0 {
		nm.Health = true
		nm.Conditions = map[string]string{"Ready": "True"}
		timeout := DefaultHealthTimeout
		if h := m.Health; h != nil {
			timeout = parseDuration(h.Timeout, DefaultHealthTimeout, time.Second, maxMaintenanceStep, "maintenance.health.timeout", add)
			if len(h.Conditions) > 0 {
				nm.Conditions = h.Conditions
			}
			for _, k := range slices.Sorted(maps.Keys(h.Conditions)) {
				switch v := h.Conditions[k]; {
				case k == "":
					add("maintenance.health.conditions", "has an empty condition type", "name Node conditions such as Ready")
				case v != "True" && v != "False" && v != "Unknown":
					add("maintenance.health.conditions."+k, fmt.Sprintf("%q is not a condition status", v), "use \"True\", \"False\" or \"Unknown\"")
				}
			}
		}
		nm.HealthTimeoutSeconds = seconds(timeout)
	}
	switch m.OnFailure {
	case "", OnFailureKeepCordoned:
	case OnFailureUncordon:
		nm.UncordonOnFailure = true
	default:
		add("maintenance.onFailure", fmt.Sprintf("%q is not allowed", m.OnFailure), "use keepCordoned or uncordon")
	}
	if !nm.Cordon && !nm.Health {
		add("maintenance", "asks for nothing", "set cordon, drain, health or soak, or remove the section")
	}
	return nm, ps
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// maintenanceCordons says whether the section cordons nodes (a drain implies it).
func MaintenanceCordons(m *Maintenance) bool {
	return m != nil && (m.Cordon || m.Drain != nil)
}
