package workflows

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Pacing within one rollout: a maintenance window, a per-domain limit, canaries, and the
// order of the rest. A request that sets none of them runs exactly as before (no extra
// commands), which keeps every recorded history replaying; the branches below test fields
// that no history recorded before they existed could carry, so they need no GetVersion.

// Limits and words of the pacing fields, documented in README's request table.
const (
	canaryStageRunning   = "running"
	canaryStageSoaking   = "soaking"
	canaryStageApproval  = "awaiting approval"
	canaryStageDone      = "done"
	waitingForWindowWord = "waiting for window"
)

// windowReading is what the recorded side effect returns.
type windowReading struct {
	Open    bool      `json:"open"`
	Until   time.Time `json:"until"`
	Problem string    `json:"problem,omitempty"`
}

// pacer is the rollout's pacing state.
type pacer struct {
	s api.Pacing
	// window: open until windowUntil, or closed until windowUntil (zero: not read yet).
	windowOpen  bool
	windowUntil time.Time
	waitWindow  bool
	soakUntil   time.Time
	approved    bool
	canaryStage string
	canaries    []string
	isCanary    map[string]bool
	domainOf    map[string]string // nodes holding (or about to hold) a slot
	inFlight    map[string]int    // slots taken, by domain
	started     map[string]int    // nodes whose child runs, by domain
}

func newPacer(s api.Pacing, carried *api.PacingProgress) pacer {
	p := pacer{s: s, domainOf: map[string]string{}, inFlight: map[string]int{}, started: map[string]int{}, isCanary: map[string]bool{}}
	if carried != nil {
		p.canaryStage = carried.CanaryStage
		p.canaries = carried.CanaryNodes
		for _, n := range p.canaries {
			p.isCanary[n] = true
		}
	}
	return p
}

// assign remembers the domain of a node about to be launched.
func (p *pacer) assign(n queuedNode) { p.domainOf[n.name] = n.domain }

// take and release count a node's window slot against its domain.
func (p *pacer) take(node string) { p.inFlight[p.domainOf[node]]++ }
func (p *pacer) release(node string) {
	d := p.domainOf[node]
	if p.inFlight[d]--; p.inFlight[d] <= 0 {
		delete(p.inFlight, d)
	}
}

// forget drops a node that holds no slot any more and will not take one again.
func (p *pacer) forget(node string) { delete(p.domainOf, node) }

// admits says whether one more node of the node's domain may be in flight.
func (p *pacer) admits(domain string) bool {
	return p.s.MaxPerDomain == 0 || p.inFlight[domain] < p.s.MaxPerDomain
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
	switch p.s.Order {
	case api.OrderByLabel:
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
	c := &api.PacingProgress{CanaryStage: p.canaryStage, CanaryNodes: p.canaries}
	for _, n := range queue {
		c.Queue = append(c.Queue, api.PacedNode{Name: n.name, Skip: n.skip, Domain: n.domain, Rank: n.rank})
	}
	return c
}

func restoredQueue(c *api.PacingProgress) []queuedNode {
	if c == nil {
		return nil
	}
	q := make([]queuedNode, 0, len(c.Queue))
	for _, n := range c.Queue {
		q = append(q, queuedNode{name: n.Name, skip: n.Skip, domain: n.Domain, rank: n.Rank})
	}
	return q
}

func (p *pacer) status() *api.PacingStatus {
	st := &api.PacingStatus{CanaryStage: p.canaryStage, Canaries: p.canaries, DomainKey: p.s.DomainKey,
		MaxPerDomain: p.s.MaxPerDomain, Order: p.s.Order}
	if len(p.inFlight) > 0 {
		st.InFlightByDom = maps.Clone(p.inFlight)
	}
	if p.s.Window != nil && !p.windowUntil.IsZero() {
		t := p.windowUntil
		if p.windowOpen {
			st.WindowClosesAt = &t
		} else {
			st.WindowOpensAt = &t
		}
	}
	switch {
	case p.waitWindow:
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
	if p.s.MaxPerDomain == 0 || len(p.inFlight) == 0 {
		return ""
	}
	var parts []string
	for _, d := range workflow.DeterministicKeys(p.inFlight) {
		name := d
		if name == "" {
			name = `""`
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, p.inFlight[d]))
	}
	return fmt.Sprintf("; in flight by %s (max %d): %s", p.s.DomainKey, p.s.MaxPerDomain, strings.Join(parts, " "))
}

// phaseWord is what the status's phase says while pacing holds the rollout back.
func (p *pacer) phaseWord() string {
	switch {
	case p.waitWindow:
		return fmt.Sprintf("%s (opens %s)", waitingForWindowWord, p.windowUntil.UTC().Format(time.RFC3339))
	case p.canaryStage == canaryStageSoaking:
		return fmt.Sprintf("soaking canaries (until %s)", p.soakUntil.UTC().Format(time.RFC3339))
	case p.canaryStage == canaryStageApproval:
		return "waiting for approval (starter approve)"
	case p.canaryStage == canaryStageRunning:
		return "canaries"
	}
	return ""
}

// readWindow reads the window's state at now. Loading a time zone reads the zone database
// (the worker embeds one, but the system's may differ between workers), so the answer is
// recorded as a side effect and replays identically.
func readWindow(ctx workflow.Context, w api.WindowSpec, now time.Time) (windowReading, error) {
	var reading windowReading
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		loc, err := time.LoadLocation(w.Zone)
		if err != nil {
			return windowReading{Problem: fmt.Sprintf("maintenanceWindow.timeZone: %q is not a known time zone (%v); use an IANA name such as Europe/Berlin", w.Zone, err)}
		}
		open, until := api.WindowState(w, loc, now)
		if !open && until.IsZero() {
			return windowReading{Problem: "maintenanceWindow: the window never opens again; give a schedule with openings to come"}
		}
		return windowReading{Open: open, Until: until}
	}).Get(&reading)
	if err == nil && reading.Problem != "" {
		err = temporal.NewNonRetryableApplicationError("invalid rollout request: "+reading.Problem, api.ErrInvalidRequest, nil)
	}
	return reading, err
}

// checkWindow reads the window once before any node starts, so an unknown time zone fails
// the rollout at once.
func (r *rollout) checkWindow(ctx workflow.Context) error {
	if r.s.Pacing.Window == nil {
		return nil
	}
	return r.refreshWindow(ctx)
}

func (r *rollout) refreshWindow(ctx workflow.Context) error {
	reading, err := readWindow(ctx, *r.s.Pacing.Window, workflow.Now(ctx))
	if err != nil {
		return err
	}
	r.pace.windowOpen, r.pace.windowUntil = reading.Open, reading.Until
	return nil
}

// windowOpenNow says whether the last reading still says open (no window: always).
func (r *rollout) windowOpenNow(ctx workflow.Context) bool {
	return r.s.Pacing.Window == nil || (r.pace.windowOpen && workflow.Now(ctx).Before(r.pace.windowUntil))
}

// awaitWindow returns once the maintenance window is open, sleeping on a durable timer until
// its next opening while it is closed. From versionStopWaits on it also returns as soon as
// stop says no node may start any more; the caller checks stop again.
func (r *rollout) awaitWindow(ctx workflow.Context, stop func() bool) error {
	if r.s.Pacing.Window == nil {
		return nil
	}
	for !r.windowOpenNow(ctx) {
		if r.features.stopWaits && stop() {
			return nil
		}
		now := workflow.Now(ctx)
		if !now.Before(r.pace.windowUntil) {
			if err := r.refreshWindow(ctx); err != nil {
				return err
			}
			continue
		}
		r.pace.waitWindow = true
		r.showProgress(ctx)
		var err error
		if r.features.stopWaits {
			_, err = workflow.AwaitWithTimeout(ctx, r.pace.windowUntil.Sub(now), stop)
		} else {
			err = workflow.Sleep(ctx, r.pace.windowUntil.Sub(now))
		}
		r.pace.waitWindow = false
		if err != nil {
			return err
		}
	}
	r.showProgress(ctx)
	return nil
}

// awaitSlotFor waits until a node that waited for another rollout may take a slot again:
// a slot in the window and, when pacing, an open window and room in its domain.
func (r *rollout) awaitSlotFor(ctx workflow.Context, node string) error {
	free := func() bool { return !r.p.Paused && r.inFlight < r.win.size }
	if !r.s.Pacing.Active() {
		return workflow.Await(ctx, func() bool { return (r.features.guarantees && r.noneMayStart()) || free() })
	}
	for {
		if err := r.awaitWindow(ctx, r.noneMayStart); err != nil {
			return err
		}
		domain := r.pace.domainOf[node]
		err := workflow.Await(ctx, func() bool { return r.noneMayStart() || (free() && r.pace.admits(domain)) })
		if err != nil || r.noneMayStart() || r.windowOpenNow(ctx) {
			return err
		}
	}
}

// queuePage turns a listed page into the queue: in name order as listed, or (pacing) with
// each node's domain and rank, canaries already run left out, in the requested order. A
// paced rollout's cursor is the page's last name: nodes start out of name order, so the
// page's remainder is carried across continue-as-new instead.
func (r *rollout) queuePage(page activities.ListNodesResult) []queuedNode {
	q := mergeListed(page)
	if !r.s.Pacing.Active() || len(q) == 0 {
		return q
	}
	r.p.Cursor = q[len(q)-1].name
	kept := q[:0]
	for _, n := range q {
		if r.pace.isCanary[n.name] {
			continue
		}
		if r.s.Pacing.DomainKey != "" {
			n.domain = page.Labels[n.name][r.s.Pacing.DomainKey]
		}
		if r.s.Pacing.OrderLabel != "" {
			n.rank = page.Labels[n.name][r.s.Pacing.OrderLabel]
		}
		kept = append(kept, n)
	}
	r.pace.order(kept)
	return kept
}

// runCanaries runs the canary nodes first, waits for their soak and approval, and fails the
// rollout if any canary failed. stop says the rollout ended here.
func (r *rollout) runCanaries(ctx workflow.Context) (stop bool, res api.RolloutResult, err error) {
	c := r.s.Pacing.Canary
	if c == nil || r.pace.canaryStage == canaryStageDone {
		return false, api.RolloutResult{}, nil
	}
	// From versionAdmission on a run can continue as new in its canary stage; the next run
	// goes on with the canaries it was handed instead of listing them again.
	resumed := r.features.admission && r.pace.canaryStage == canaryStageRunning
	r.pace.canaryStage = canaryStageRunning
	if !resumed {
		if err := r.listCanaries(ctx); err != nil {
			if ctx.Err() != nil {
				res, err := r.cancelled(ctx)
				return true, res, err
			}
			return true, api.RolloutResult{}, err
		}
	}
	if r.features.admission {
		r.resumeWaiting(ctx)
	}
	failed := func() bool { return r.p.Counts.Failures() > 0 }
	historyFull := func() bool { return r.features.admission && r.historyNearLimits(ctx) }
	settled := func() bool { return r.inFlight == 0 && len(r.waiting) == 0 }
	continuing := false
	for len(r.queue) > 0 && !continuing {
		var ok bool
		var err error
		if r.features.admission {
			ok, err = r.nextAdmitted(ctx, historyFull)
		} else {
			ok, err = r.startNext(ctx, failed)
		}
		if err != nil {
			res, err := r.cancelled(ctx)
			return true, res, err
		}
		if !ok {
			break
		}
		continuing = historyFull()
	}
	// Canaries held by another rollout for days must not fill the history: once it is near
	// its limits, nothing is in flight and no canary failed, the run continues as new with
	// them (the waiting ones handed over, the rest still queued).
	if err := workflow.Await(ctx, func() bool { return settled() || (historyFull() && r.inFlight == 0) }); err != nil {
		res, err := r.cancelled(ctx)
		return true, res, err
	}
	if !settled() && !failed() || continuing && !failed() {
		r.continuing = true
		if _, err := r.drain(ctx, true, true); err != nil {
			res, err := r.cancelled(ctx)
			return true, res, err
		}
		res, err := r.continueAsNew(ctx)
		return true, res, err
	}
	if err := workflow.Await(ctx, settled); err != nil {
		res, err := r.cancelled(ctx)
		return true, res, err
	}
	if failed() {
		r.done = true
		result := r.result(ctx)
		var names []string
		for _, f := range result.Failures {
			names = append(names, f.Node+" ("+string(f.Outcome)+" "+f.Reason+")")
		}
		return true, result, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"rollout %s stopped after its canaries: %d of %d canary nodes failed, no other node was started; failed: %s",
			r.req.Name, result.Counts.Failures(), len(r.pace.canaries), strings.Join(names, ", ")), api.ErrCanaryFailed, nil, result)
	}
	if r.s.Pacing.Soak > 0 {
		r.pace.canaryStage = canaryStageSoaking
		r.pace.soakUntil = workflow.Now(ctx).Add(r.s.Pacing.Soak)
		r.showProgress(ctx)
		if err := workflow.Sleep(ctx, r.s.Pacing.Soak); err != nil {
			res, err := r.cancelled(ctx)
			return true, res, err
		}
	}
	if c.Approval {
		r.pace.canaryStage = canaryStageApproval
		r.showProgress(ctx)
		if err := workflow.Await(ctx, func() bool { return r.pace.approved }); err != nil {
			res, err := r.cancelled(ctx)
			return true, res, err
		}
	}
	r.pace.canaryStage = canaryStageDone
	r.queue, r.p.Cursor, r.p.ListingDone = nil, "", false
	r.showProgress(ctx)
	return false, api.RolloutResult{}, nil
}

// listCanaries lists the canary nodes: by name, or the rollout's nodes that also match the
// canary selector.
func (r *rollout) listCanaries(ctx workflow.Context) error {
	c := r.s.Pacing.Canary
	in := activities.ListNodesInput{
		Rollout:      r.req.Name,
		TemplateHash: r.p.TemplateHash,
		Rerun:        r.req.Rerun,
		Limit:        api.MaxCanaries,
		Labels:       r.s.Pacing.LabelKeys(),
	}
	switch {
	case len(c.Nodes) > 0:
		in.Names = c.Nodes
		if r.features.admission {
			// Named canaries of a rollout that selects its nodes must be among them.
			in.Selector, in.FieldSelector = r.req.NodeSelector, r.req.FieldSelector
		}
	case len(r.req.Nodes) > 0:
		in.Selector = c.Selector
	default:
		in.Selector = strings.Trim(r.req.NodeSelector+","+c.Selector, ",")
		in.FieldSelector = r.req.FieldSelector
	}
	var a *activities.Activities
	var page activities.ListNodesResult
	err := workflow.ExecuteActivity(withAPIActivity(ctx, "list canary nodes"), a.ListNodes, in).Get(ctx, &page)
	if err != nil {
		return asWorkflowError(err)
	}
	// A rollout that names its nodes takes as canaries those of them the selector matches,
	// which the cluster-wide listing finds among every node it matches.
	ownNodes := len(c.Nodes) == 0 && len(r.req.Nodes) > 0
	var inRequest map[string]bool
	keepOwn := func(p *activities.ListNodesResult) {
		p.Nodes = slices.DeleteFunc(p.Nodes, func(n string) bool { return !inRequest[n] })
		p.Done = slices.DeleteFunc(p.Done, func(n string) bool { return !inRequest[n] })
	}
	if ownNodes {
		inRequest = map[string]bool{}
		for _, n := range r.req.Nodes {
			inRequest[n] = true
		}
		keepOwn(&page)
		// From versionCanaryOwnNodes on, the 100 canaries are counted among the rollout's own
		// nodes: the listing pages on through the selector's other matches.
		if page.More && workflow.GetVersion(ctx, versionCanaryOwnNodes, workflow.DefaultVersion, 1) == 1 {
			for page.More && len(page.Nodes)+len(page.Done) <= api.MaxCanaries {
				in.After, in.Limit = page.Next, listPageSize
				var next activities.ListNodesResult
				err := workflow.ExecuteActivity(withAPIActivity(ctx, "list canary nodes after "+in.After), a.ListNodes, in).Get(ctx, &next)
				if err != nil {
					return asWorkflowError(err)
				}
				keepOwn(&next)
				page.Nodes = append(page.Nodes, next.Nodes...)
				page.Done = append(page.Done, next.Done...)
				for _, n := range workflow.DeterministicKeys(next.Labels) {
					if page.Labels == nil {
						page.Labels = map[string]map[string]string{}
					}
					page.Labels[n] = next.Labels[n]
				}
				page.More, page.Next = next.More, next.Next
			}
			page.More = len(page.Nodes)+len(page.Done) > api.MaxCanaries
		}
	}
	if page.More {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"invalid rollout request: canary.selector: selects more than %d nodes; narrow it", api.MaxCanaries), api.ErrInvalidRequest, nil)
	}
	if len(page.Unselected) > 0 {
		var ps []string
		for _, n := range page.Unselected {
			ps = append(ps, fmt.Sprintf("canary.nodes[%d]: %q is not selected by the rollout (nodeSelector %q, fieldSelector %q)",
				slices.Index(c.Nodes, n), n, r.req.NodeSelector, r.req.FieldSelector))
		}
		return temporal.NewNonRetryableApplicationError("invalid rollout request: "+strings.Join(ps, "; ")+
			"; canaries must be nodes of the rollout: correct the name or the selector", api.ErrInvalidRequest, nil)
	}
	r.queue = r.queuePage(page)
	r.pace.canaries = nil
	for _, n := range r.queue {
		r.pace.canaries = append(r.pace.canaries, n.name)
		r.pace.isCanary[n.name] = true
	}
	r.p.Selected = max(r.p.Selected, len(r.queue))
	r.p.ListingDone = true
	r.showProgress(ctx)
	return nil
}

// registerApprove lets an operator go on after the canaries (update approve).
func (r *rollout) registerApprove(ctx workflow.Context) error {
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateApprove,
		func(ctx workflow.Context, _ api.ApproveRequest) (api.ApproveResult, error) {
			r.pace.approved = true
			r.showProgress(ctx)
			return api.ApproveResult{Canaries: len(r.pace.canaries)}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(api.ApproveRequest) error {
			switch {
			case r.s.Pacing.Canary == nil || !r.s.Pacing.Canary.Approval:
				return errors.New("approve: this rollout has no approval gate (its request sets no canary.approval)")
			case r.pace.approved || r.pace.canaryStage == canaryStageDone:
				return errors.New("approve: already approved")
			case r.pace.canaryStage != canaryStageApproval:
				return fmt.Errorf("approve: the canaries have not finished yet (%s); approve when status says waiting for approval", r.pace.phaseWord())
			}
			return nil
		}})
}
