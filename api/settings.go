package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Settings are a request's values with the defaults applied and durations parsed: what the
// Rollout workflow runs by. Read them from a valid request (see Problems): a field with a
// problem reads as its default.
type Settings struct {
	Namespace          string
	Parallelism        int
	FailureBudget      FailureBudget
	Batch              Batch
	DelayBetweenNodes  time.Duration
	JobTimeout         time.Duration
	JobTTL             time.Duration
	KeepJobs           KeepJobs
	ContinueAsNewAfter int
	Pacing             Pacing
	// Maintenance is the maintenance section as each node workflow gets it; nil without one.
	Maintenance *NodeMaintenance
}

// Settings is the request with its defaults applied. It is deterministic: workflows call it.
func (r RolloutRequest) Settings() Settings {
	s := Settings{
		Namespace:          r.Namespace,
		Parallelism:        r.Parallelism,
		KeepJobs:           KeepJobs(r.KeepJobs),
		ContinueAsNewAfter: r.ContinueAsNewAfter,
		DelayBetweenNodes:  delayBetweenNodesField.read(r.DelayBetweenNodes),
		JobTimeout:         jobTimeoutField.read(r.JobTimeout),
		JobTTL:             jobTTLField.read(r.JobTTL),
		Pacing:             r.pacing(),
		Maintenance:        r.Maintenance.resolve(),
	}
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	if s.Parallelism == 0 {
		s.Parallelism = DefaultParallelism
	}
	s.FailureBudget, _ = parseFailureBudget(string(r.MaxFailures))
	s.Batch = r.batch(s.Parallelism)
	if s.KeepJobs == "" {
		s.KeepJobs = DefaultKeepJobs
	}
	if s.ContinueAsNewAfter == 0 {
		s.ContinueAsNewAfter = DefaultContinueAsNewAfter
	}
	return s
}

// batch is the launch window's rule: the request's batch with its defaults, or a fixed window
// of the parallelism.
func (r RolloutRequest) batch(parallelism int) Batch {
	if r.Batch == nil {
		return Batch{Initial: parallelism, Growth: GrowthFixed}
	}
	b := *r.Batch
	if b.Growth == "" {
		b.Growth = GrowthFixed
	}
	switch {
	case b.Growth == GrowthLinear && b.Step == 0:
		b.Step = b.Initial
	case b.Growth == GrowthExponential && b.Step == 0:
		b.Step = 2
	}
	return b
}

// FailureBudget is maxFailures: a count, or a percentage of the selected nodes.
type FailureBudget struct {
	count   int
	percent int
	isShare bool
}

// Allows reports whether failures stay within the budget for this many selected nodes.
func (b FailureBudget) Allows(failures, selected int) bool {
	if b.isShare {
		return failures*100 <= b.percent*selected
	}
	return failures <= b.count
}

func (b FailureBudget) String() string {
	if b.isShare {
		return fmt.Sprintf("%d%%", b.percent)
	}
	return strconv.Itoa(b.count)
}

func parseFailureBudget(v string) (FailureBudget, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return FailureBudget{}, nil
	}
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil || n < 0 || n > 100 {
			return FailureBudget{}, fmt.Errorf("%q is not a percentage between 0%% and 100%%", v)
		}
		return FailureBudget{percent: n, isShare: true}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return FailureBudget{}, fmt.Errorf("%q is not a non-negative count", v)
	}
	return FailureBudget{count: n}, nil
}
