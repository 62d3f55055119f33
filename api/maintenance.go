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

// resolve is the section as node workflows get it, its defaults applied; nil when the
// request has none.
func (m *Maintenance) resolve() *NodeMaintenance {
	if m == nil {
		return nil
	}
	nm := &NodeMaintenance{Cordon: m.Cordon || m.Drain != nil}
	if d := m.Drain; d != nil {
		nm.Drain = true
		nm.DrainTimeoutSeconds = seconds(drainTimeoutField.read(d.Timeout))
		nm.PodSelector = d.PodSelector
		nm.DeleteEmptyDirData = d.DeleteEmptyDirData
		nm.Force = d.Force
		if d.GracePeriod != "" {
			g := seconds(gracePeriodField.read(d.GracePeriod))
			nm.GracePeriodSeconds = &g
		}
	}
	soak := maintenanceSoakField.read(m.Soak)
	nm.SoakSeconds = seconds(soak)
	if m.Health != nil || soak > 0 {
		nm.Health = true
		nm.Conditions = map[string]string{"Ready": "True"}
		timeout := DefaultHealthTimeout
		if h := m.Health; h != nil {
			timeout = healthTimeoutField.read(h.Timeout)
			if len(h.Conditions) > 0 {
				nm.Conditions = h.Conditions
			}
		}
		nm.HealthTimeoutSeconds = seconds(timeout)
	}
	nm.UncordonOnFailure = m.OnFailure == OnFailureUncordon
	return nm
}

// check checks the section, if the request has one.
func (m *Maintenance) check(ps *problems) {
	if m == nil {
		return
	}
	if d := m.Drain; d != nil {
		drainTimeoutField.check(ps, d.Timeout)
		if d.PodSelector != "" {
			//workflowcheck:ignore
			if _, err := labels.Parse(d.PodSelector); err != nil {
				ps.add("maintenance.drain.podSelector", fmt.Sprintf("%q does not parse: %v", d.PodSelector, err), "write a label selector such as \"app=web\", or omit it to evict every Pod")
			}
		}
		gracePeriodField.check(ps, d.GracePeriod)
	}
	maintenanceSoakField.check(ps, m.Soak)
	if h := m.Health; h != nil {
		healthTimeoutField.check(ps, h.Timeout)
		// Sorted, so in the keys' order, never the map's.
		//workflowcheck:ignore
		for _, k := range slices.Sorted(maps.Keys(h.Conditions)) {
			switch v := h.Conditions[k]; {
			case k == "":
				ps.add("maintenance.health.conditions", "has an empty condition type", "name Node conditions such as Ready")
			case v != "True" && v != "False" && v != "Unknown":
				ps.add("maintenance.health.conditions."+k, fmt.Sprintf("%q is not a condition status", v), "use \"True\", \"False\" or \"Unknown\"")
			}
		}
	}
	switch m.OnFailure {
	case "", OnFailureKeepCordoned, OnFailureUncordon:
	default:
		ps.add("maintenance.onFailure", fmt.Sprintf("%q is not allowed", m.OnFailure), "use keepCordoned or uncordon")
	}
	if nm := m.resolve(); !nm.Cordon && !nm.Health {
		ps.add("maintenance", "asks for nothing", "set cordon, drain, health or soak, or remove the section")
	}
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }
