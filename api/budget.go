package api

// SlotHolder is who holds a slot of a cluster's disruption budget: the node workflow it was
// granted for, and the run of the Rollout that asked.
type SlotHolder struct {
	Rollout    string `json:"rollout"`
	RolloutRun string `json:"rolloutRun"`
	Node       string `json:"node"`
}

// Key identifies the grant: one per node workflow and rollout run.
func (h SlotHolder) Key() string { return h.Rollout + "/" + h.RolloutRun + "/" + h.Node }

// BudgetStatus answers QueryBudget.
type BudgetStatus struct {
	Budget    int          `json:"budget"`
	InUse     int          `json:"inUse"`
	Holders   []SlotHolder `json:"holders"`
	Queued    []SlotHolder `json:"queued"`
	Reclaimed int          `json:"reclaimed"`
}
