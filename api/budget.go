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

const (
	ClusterBudgetWorkflow = "ClusterBudget"
)

const (
	// BudgetIDPrefix + cluster is the coordinator's workflow ID (without a cluster:
	// "noderollout-budget").
	BudgetIDPrefix = "noderollout-budget-"
)

const (
	// QueryBudget returns the coordinator's BudgetStatus.
	QueryBudget = "budget"
)

// BudgetStatus answers QueryBudget.
type BudgetStatus struct {
	Budget    int          `json:"budget"`
	InUse     int          `json:"inUse"`
	Holders   []SlotHolder `json:"holders"`
	Queued    []SlotHolder `json:"queued"`
	Reclaimed int          `json:"reclaimed"`
}
