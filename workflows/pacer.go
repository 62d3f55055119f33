package workflows

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// The pacer is a rollout's pacing state and its pure decisions: the maintenance window's last
// reading, the canary stage, the nodes in flight by domain, the order of a listed page, and
// what status says of them. pacing.go waits on it in the workflow.

// pacer is the rollout's pacing state.
type pacer struct {
	rules api.Pacing
	// window: open until windowUntil, or closed until windowUntil (zero: not read yet).
	maintenanceOpen  bool
	maintenanceUntil time.Time
	waitingForWindow bool
	soakUntil        time.Time
	approved         bool
	canaryStage      string
	canaries         []string
	isCanary         map[string]bool
	// passedOverCanaries: canaries that did not run in the canary stage, blocked by their Pods
	// or carrying a taint the Job does not tolerate (by name, outcome and reason).
	passedOverCanaries []string
	domainOf           map[string]string // nodes holding (or about to hold) a slot
	inFlightByDomain   map[string]int    // slots taken, by domain
	startedByDomain    map[string]int    // nodes whose child runs, by domain
}

func newPacer(s api.Pacing, carried *api.PacingProgress) pacer {
	p := pacer{rules: s, domainOf: map[string]string{}, inFlightByDomain: map[string]int{}, startedByDomain: map[string]int{}, isCanary: map[string]bool{}}
	if carried != nil {
		p.canaryStage = carried.CanaryStage
		p.canaries = carried.CanaryNodes
		p.passedOverCanaries = carried.PassedOverCanaries
		for _, n := range p.canaries {
			p.isCanary[n] = true
		}
	}
	return p
}

// windowOpenAt says whether the last reading of the maintenance window says it is open at now
// (no window: always).
func (p *pacer) windowOpenAt(now time.Time) bool {
	return p.rules.Window == nil || (p.maintenanceOpen && now.Before(p.maintenanceUntil))
}

// canaryFailed says a canary failed while the canaries ran: failures are the rollout's.
func (p *pacer) canaryFailed(failures int) bool {
	return p.rules.Canary != nil && p.canaryStage == canaryStageRunning && failures > 0
}

// holdsBackForCanaries says node may not start yet because the canaries go first: it is not
// one of them, or they have not started yet.
func (p *pacer) holdsBackForCanaries(node string) bool {
	return p.rules.Canary != nil && p.canaryStage != canaryStageDone &&
		(p.canaryStage != canaryStageRunning || !p.isCanary[node])
}

// assign remembers the domain of a node about to be launched.
func (p *pacer) assign(n queuedNode) { p.domainOf[n.name] = n.domain }

// take and release count a node's window slot against its domain.
func (p *pacer) take(node string) { p.inFlightByDomain[p.domainOf[node]]++ }

func (p *pacer) release(node string) {
	d := p.domainOf[node]
	if p.inFlightByDomain[d]--; p.inFlightByDomain[d] <= 0 {
		delete(p.inFlightByDomain, d)
	}
}

// forget drops a node that holds no slot any more and will not take one again.
func (p *pacer) forget(node string) { delete(p.domainOf, node) }

// admits says whether one more node of the node's domain may be in flight.
func (p *pacer) admits(domain string) bool {
	return p.rules.MaxPerDomain == 0 || p.inFlightByDomain[domain] < p.rules.MaxPerDomain
}

// pick is the index of the first queued node that may go now (a skip always may), or -1.
func (p *pacer) pick(queue []queuedNode) int {
	for i, n := range queue {
		if n.skip != "" || p.admits(n.domain) {
			return i
		}
	}
	return -1
}

// order sorts a listed page as the request asks; name order is the listing's own.
func (p *pacer) order(queue []queuedNode) {
	switch p.rules.Order {
	case api.OrderByLabel, api.OrderGiven: // given: rank is the place in the nodes list
		sort.SliceStable(queue, func(i, j int) bool { return rankLess(queue[i], queue[j]) })
	case api.OrderSpread:
		spread(queue)
	}
}

// rankLess orders by the label's value: numbers numerically and before words, unlabelled
// nodes last, ties by name.
func rankLess(a, b queuedNode) bool {
	if a.rank == b.rank {
		return a.name < b.name
	}
	if (a.rank == "") != (b.rank == "") {
		return b.rank == ""
	}
	an, aerr := strconv.ParseInt(a.rank, 10, 64)
	bn, berr := strconv.ParseInt(b.rank, 10, 64)
	switch {
	case aerr == nil && berr == nil && an != bn:
		return an < bn
	case aerr == nil && berr == nil:
		return a.name < b.name
	case (aerr == nil) != (berr == nil):
		return aerr == nil
	}
	return a.rank < b.rank
}

// spread interleaves the domains (rank holds the spread label's value): one node of each
// domain in turn, domains in name order, each domain's nodes in name order.
func spread(queue []queuedNode) {
	byDomain := map[string][]queuedNode{}
	var domains []string
	for _, n := range queue {
		if _, ok := byDomain[n.rank]; !ok {
			domains = append(domains, n.rank)
		}
		byDomain[n.rank] = append(byDomain[n.rank], n)
	}
	sort.Strings(domains)
	out := queue[:0:0]
	for len(out) < len(queue) {
		for _, d := range domains {
			if ns := byDomain[d]; len(ns) > 0 {
				out = append(out, ns[0])
				byDomain[d] = ns[1:]
			}
		}
	}
	copy(queue, out)
}

func (p *pacer) carried(queue []queuedNode) *api.PacingProgress {
	c := &api.PacingProgress{CanaryStage: p.canaryStage, CanaryNodes: p.canaries, PassedOverCanaries: p.passedOverCanaries}
	for _, n := range queue {
		c.Queue = append(c.Queue, api.PacedNode{Name: n.name, Skip: n.skip, Reason: n.reason, Domain: n.domain, Rank: n.rank})
	}
	return c
}

func restoredQueue(c *api.PacingProgress) []queuedNode {
	if c == nil {
		return nil
	}
	q := make([]queuedNode, 0, len(c.Queue))
	for _, n := range c.Queue {
		q = append(q, queuedNode{name: n.Name, skip: n.Skip, reason: n.Reason, domain: n.Domain, rank: n.Rank})
	}
	return q
}

func (p *pacer) status() *api.PacingStatus {
	st := &api.PacingStatus{CanaryStage: p.canaryStage, Canaries: p.canaries, DomainKey: p.rules.DomainKey,
		MaxPerDomain: p.rules.MaxPerDomain, Order: p.rules.Order}
	if len(p.inFlightByDomain) > 0 {
		st.InFlightByDom = maps.Clone(p.inFlightByDomain)
	}
	if p.rules.Window != nil && !p.maintenanceUntil.IsZero() {
		t := p.maintenanceUntil
		if p.maintenanceOpen {
			st.WindowClosesAt = &t
		} else {
			st.WindowOpensAt = &t
		}
	}
	switch {
	case p.waitingForWindow:
		st.WaitingFor = "window"
	case p.canaryStage == canaryStageSoaking:
		st.WaitingFor = "soak"
		t := p.soakUntil
		st.SoakUntil = &t
	case p.canaryStage == canaryStageApproval:
		st.WaitingFor = "approval"
	}
	return st
}

// details is the per-domain part of the UI's current details.
func (p *pacer) details() string {
	if p.rules.MaxPerDomain == 0 || len(p.inFlightByDomain) == 0 {
		return ""
	}
	var parts []string
	for _, d := range workflow.DeterministicKeys(p.inFlightByDomain) {
		name := d
		if name == "" {
			name = `""`
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, p.inFlightByDomain[d]))
	}
	return fmt.Sprintf("; in flight by %s (max %d): %s", p.rules.DomainKey, p.rules.MaxPerDomain, strings.Join(parts, " "))
}

// phaseWord is what the status's phase says while pacing holds the rollout back.
func (p *pacer) phaseWord() string {
	switch {
	case p.waitingForWindow:
		return fmt.Sprintf("%s (opens %s)", waitingForWindowWord, p.maintenanceUntil.UTC().Format(time.RFC3339))
	case p.canaryStage == canaryStageSoaking:
		return fmt.Sprintf("soaking canaries (until %s)", p.soakUntil.UTC().Format(time.RFC3339))
	case p.canaryStage == canaryStageApproval:
		return "waiting for approval (starter approve)"
	case p.canaryStage == canaryStageRunning:
		return "canaries"
	}
	return ""
}

// The canary stages (carried across continue-as-new in PacingProgress.CanaryStage) and the
// phase of a rollout waiting for its window.
const (
	canaryStageRunning   = "running"
	canaryStageSoaking   = "soaking"
	canaryStageApproval  = "awaiting approval"
	canaryStageDone      = "done"
	waitingForWindowWord = "waiting for window"
)
