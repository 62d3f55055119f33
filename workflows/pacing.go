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

	"github.com/robfig/cron/v3"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/noderollout/noderollout/activities"
)

// Pacing within one rollout: a maintenance window, a per-domain limit, canaries, and the
// order of the rest. A request that sets none of them runs exactly as before (no extra
// commands), which keeps every recorded history replaying; the branches below test fields
// that no history recorded before they existed could carry, so they need no GetVersion.

// Limits and words of the pacing fields, documented in README's request table.
const (
	MaxCanaries          = 100
	MaxWindowDuration    = 7 * 24 * time.Hour
	MaxSoak              = 7 * 24 * time.Hour
	OrderByName          = "name"
	OrderByLabel         = "label"
	OrderSpread          = "spread"
	ErrCanaryFailed      = "CanaryFailed"
	UpdateApprove        = "approve"
	canaryStageRunning   = "running"
	canaryStageSoaking   = "soaking"
	canaryStageApproval  = "awaiting approval"
	canaryStageDone      = "done"
	waitingForWindowWord = "waiting for window"
)

// MaintenanceWindow is a recurring time in which nodes may start: on Days (all days when
// empty) from Start, or at each time the Cron expression names, for Duration, in TimeZone
// (IANA name, default UTC). Outside it no node starts; nodes in flight finish.
type MaintenanceWindow struct {
	Days     []string `json:"days,omitempty"`
	Start    string   `json:"start,omitempty"`
	Cron     string   `json:"cron,omitempty"`
	Duration string   `json:"duration"`
	TimeZone string   `json:"timeZone,omitempty"`
}

// Topology limits how many nodes sharing one value of the node label Key are in flight.
type Topology struct {
	Key          string `json:"key"`
	MaxPerDomain int    `json:"maxPerDomain"`
}

// Canary names the nodes that run first (by name, or nodes of the rollout matching
// Selector); then the rollout waits Soak and, with Approval, for the approve update.
type Canary struct {
	Nodes    []string `json:"nodes,omitempty"`
	Selector string   `json:"selector,omitempty"`
	Soak     string   `json:"soak,omitempty"`
	Approval bool     `json:"approval,omitempty"`
}

// Order is the order the nodes after the canaries start in, within each listed page.
type Order struct {
	By    string `json:"by"`              // name (default) | label | spread
	Label string `json:"label,omitempty"` // label: its value; spread: the domains (default topology.key)
}

// ApproveRequest is the input of the approve update.
type ApproveRequest struct {
	Note string `json:"note,omitempty"`
}

// ApproveResult is what the approve update returns.
type ApproveResult struct {
	Canaries int `json:"canaries"` // canary nodes that finished before the approval
}

// PacingProgress is the pacing state carried across continue-as-new.
type PacingProgress struct {
	// Queue is the listed page not yet handled: reordering and per-domain limits start nodes
	// out of name order, so the cursor alone cannot say which are left.
	Queue       []PacedNode `json:"queue,omitempty"`
	CanaryStage string      `json:"canaryStage,omitempty"`
	CanaryNodes []string    `json:"canaryNodes,omitempty"`
}

// PacedNode is a listed node with what pacing needs of it.
type PacedNode struct {
	Name   string `json:"name"`
	Skip   string `json:"skip,omitempty"`
	Domain string `json:"domain,omitempty"`
	Rank   string `json:"rank,omitempty"`
}

// PacingStatus is the pacing part of the status query.
type PacingStatus struct {
	// WaitingFor is "window", "soak" or "approval" while the rollout holds back for it.
	WaitingFor     string         `json:"waitingFor,omitempty"`
	WindowOpensAt  *time.Time     `json:"windowOpensAt,omitempty"`
	WindowClosesAt *time.Time     `json:"windowClosesAt,omitempty"`
	SoakUntil      *time.Time     `json:"soakUntil,omitempty"`
	CanaryStage    string         `json:"canaryStage,omitempty"`
	Canaries       []string       `json:"canaries,omitempty"`
	DomainKey      string         `json:"domainKey,omitempty"`
	MaxPerDomain   int            `json:"maxPerDomain,omitempty"`
	InFlightByDom  map[string]int `json:"inFlightByDomain,omitempty"`
	Order          string         `json:"order,omitempty"`
}

// pacing is the validated pacing part of a request.
type pacing struct {
	window       *windowSpec
	domainKey    string
	maxPerDomain int
	canary       *Canary
	soak         time.Duration
	order        string
	orderLabel   string
}

// active says whether the request paces at all; without, the rollout runs as it always did.
func (p pacing) active() bool {
	return p.window != nil || p.maxPerDomain > 0 || p.canary != nil || (p.order != "" && p.order != OrderByName)
}

// labelKeys are the node labels ListNodes must report.
func (p pacing) labelKeys() []string {
	var keys []string
	if p.domainKey != "" {
		keys = append(keys, p.domainKey)
	}
	if p.orderLabel != "" && p.orderLabel != p.domainKey {
		keys = append(keys, p.orderLabel)
	}
	return keys
}

// windowSpec is a parsed MaintenanceWindow.
type windowSpec struct {
	days     [7]bool // by time.Weekday
	hour     int
	minute   int
	duration time.Duration
	zone     string
	cron     cron.Schedule // instead of days and start
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// checkPacing validates the pacing fields; it is deterministic (the time zone's existence
// is checked where it is loaded, see windowState).
func checkPacing(req RolloutRequest, add func(field, what, fix string)) pacing {
	var p pacing
	if w := req.MaintenanceWindow; w != nil {
		p.window = parseWindow(*w, add)
	}
	if t := req.Topology; t != nil {
		if t.Key == "" {
			add("topology.key", "is required", "name a node label such as topology.kubernetes.io/zone")
		} else if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			add("topology.key", fmt.Sprintf("%q is not a label key (%s)", t.Key, strings.Join(errs, ", ")), "name a node label such as topology.kubernetes.io/zone")
		}
		if t.MaxPerDomain < 1 {
			add("topology.maxPerDomain", fmt.Sprintf("must be at least 1, got %d", t.MaxPerDomain), "give the most nodes of one domain allowed in flight, e.g. 1")
		}
		p.domainKey, p.maxPerDomain = t.Key, t.MaxPerDomain
	}
	if c := req.Canary; c != nil {
		p.canary = c
		switch {
		case len(c.Nodes) > 0 && c.Selector != "":
			add("canary.nodes", "is set together with canary.selector", "name the canaries or select them, not both")
		case len(c.Nodes) == 0 && c.Selector == "":
			add("canary", "selects no canary", "set canary.nodes to node names or canary.selector to a label selector")
		}
		if len(c.Nodes) > MaxCanaries {
			add("canary.nodes", fmt.Sprintf("lists %d names, more than %d", len(c.Nodes), MaxCanaries), "pick a few representative nodes")
		}
		inRequest := map[string]bool{}
		for _, n := range req.Nodes {
			inRequest[n] = true
		}
		for i, n := range c.Nodes {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				add(fmt.Sprintf("canary.nodes[%d]", i), fmt.Sprintf("%q is not a valid node name", n), "node names are DNS-1123 subdomains")
			} else if len(req.Nodes) > 0 && !inRequest[n] {
				add(fmt.Sprintf("canary.nodes[%d]", i), fmt.Sprintf("%q is not one of nodes", n), "canaries must be nodes of the rollout")
			}
		}
		if c.Selector != "" {
			//workflowcheck:ignore
			if _, err := labels.Parse(c.Selector); err != nil {
				add("canary.selector", fmt.Sprintf("%q does not parse: %v", c.Selector, err), "write a label selector such as \"canary=true\"")
			}
		}
		p.soak = parseDuration(c.Soak, 0, 0, MaxSoak, "canary.soak", add)
	}
	p.order = OrderByName
	if o := req.Order; o != nil {
		p.order, p.orderLabel = o.By, o.Label
		switch o.By {
		case "", OrderByName:
			p.order = OrderByName
			if o.Label != "" {
				add("order.label", "is only for order.by label or spread", "remove it, or set order.by")
			}
		case OrderByLabel:
			if o.Label == "" {
				add("order.label", "is required with order.by label", "name the node label whose value orders the nodes, e.g. rollout-priority")
			}
		case OrderSpread:
			if p.orderLabel == "" {
				p.orderLabel = p.domainKey
			}
			if p.orderLabel == "" {
				add("order.label", "names no domain to spread over", "set order.label, or topology.key")
			}
		default:
			add("order.by", fmt.Sprintf("%q is not an order", o.By), "use name, label or spread")
		}
		if o.Label != "" {
			if errs := validation.IsQualifiedName(o.Label); len(errs) > 0 {
				add("order.label", fmt.Sprintf("%q is not a label key", o.Label), "name a node label")
			}
		}
	}
	return p
}

func parseWindow(w MaintenanceWindow, add func(field, what, fix string)) *windowSpec {
	s := &windowSpec{zone: w.TimeZone}
	if s.zone == "" {
		s.zone = "UTC"
	}
	s.duration = parseDuration(w.Duration, 0, time.Second, MaxWindowDuration, "maintenanceWindow.duration", add)
	if w.Duration == "" {
		add("maintenanceWindow.duration", "is required", "write how long the window stays open, e.g. \"4h\"")
	}
	if strings.ContainsAny(s.zone, " \\") || strings.HasPrefix(s.zone, "/") || strings.Contains(s.zone, "..") {
		add("maintenanceWindow.timeZone", fmt.Sprintf("%q is not an IANA time zone name", w.TimeZone), "use a name such as Europe/Berlin or UTC")
	}
	if w.Cron != "" {
		if w.Start != "" || len(w.Days) > 0 {
			add("maintenanceWindow.cron", "is set together with start/days", "give either a cron expression or days and start")
		}
		sched, err := cron.ParseStandard(w.Cron)
		switch {
		case err != nil || strings.Contains(w.Cron, "TZ="):
			add("maintenanceWindow.cron", fmt.Sprintf("%q is not a five-field cron expression (%v)", w.Cron, err), "write e.g. \"0 22 * * 6\" (Saturdays 22:00); the zone goes in timeZone")
		case isConstantDelay(sched):
			add("maintenanceWindow.cron", fmt.Sprintf("%q has no fixed opening: @every counts from whenever the window is read, so it never opens", w.Cron),
				"write the openings as a five-field cron expression, e.g. \"0 * * * *\" (every hour on the hour)")
		case sched.Next(cronCheckFrom).IsZero():
			add("maintenanceWindow.cron", fmt.Sprintf("%q never matches a date (such as 30 February), so the window never opens", w.Cron),
				"name a day that exists, e.g. \"0 0 28 2 *\"")
		}
		s.cron = sched
		return s
	}
	if len(w.Days) == 0 {
		s.days = [7]bool{true, true, true, true, true, true, true}
	}
	for i, d := range w.Days {
		wd, ok := weekdays[strings.ToLower(d[:min(3, len(d))])]
		if !ok || (len(d) > 3 && !strings.HasPrefix(strings.ToLower(wd.String()), strings.ToLower(d))) {
			add(fmt.Sprintf("maintenanceWindow.days[%d]", i), fmt.Sprintf("%q is not a day of the week", d), "use Mon, Tue, Wed, Thu, Fri, Sat or Sun")
			continue
		}
		s.days[wd] = true
	}
	hh, mm, ok := strings.Cut(w.Start, ":")
	h, herr := strconv.Atoi(hh)
	m, merr := strconv.Atoi(mm)
	if !ok || herr != nil || merr != nil || h < 0 || h > 23 || m < 0 || m > 59 || len(mm) != 2 {
		add("maintenanceWindow.start", fmt.Sprintf("%q is not a time of day", w.Start), "write it as HH:MM in the window's time zone, e.g. \"22:00\"")
	}
	s.hour, s.minute = h, m
	return s
}

// cronCheckFrom is where validation looks for a cron window's first opening: a fixed time
// keeps validation deterministic, and the parser looks five years ahead, which every date that
// exists (29 February included) falls within.
var cronCheckFrom = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

func isConstantDelay(s cron.Schedule) bool {
	_, ok := s.(cron.ConstantDelaySchedule)
	return ok
}

// windowState says whether the window is open at now and when that next changes: the end of
// the opening now falls in, or the next opening. Openings are computed on the local calendar
// of the zone, so a window at 09:00 opens at 09:00 local time on both sides of a DST change;
// the duration is elapsed time.
func windowState(w windowSpec, loc *time.Location, now time.Time) (open bool, until time.Time) {
	if w.cron != nil {
		return cronWindowState(w, loc, now)
	}
	local := now.In(loc)
	y, m, d := local.Date()
	var next time.Time
	for offset := -8; offset <= 8; offset++ {
		opening := time.Date(y, m, d+offset, w.hour, w.minute, 0, 0, loc)
		if !w.days[opening.Weekday()] {
			continue
		}
		closing := opening.Add(w.duration)
		if !opening.After(now) && now.Before(closing) {
			if !open || closing.After(until) {
				open, until = true, closing
			}
		}
		if opening.After(now) && (next.IsZero() || opening.Before(next)) {
			next = opening
		}
	}
	if open {
		return true, until
	}
	return false, next
}

// cronWindowState is windowState for a cron window: open while an opening in the last
// duration is not over.
//
// The loop is bounded: a five-field expression opens at most once a minute, so a window of at
// most MaxWindowDuration has at most maxCronOpenings openings that can still be open; a
// schedule with no next opening (zero) ends it, and reads as closed with a zero until.
func cronWindowState(w windowSpec, loc *time.Location, now time.Time) (open bool, until time.Time) {
	local := now.In(loc)
	// The parser's schedules have a resolution of a second; start just before the earliest
	// opening that can still be open.
	o := w.cron.Next(local.Add(-w.duration))
	for range maxCronOpenings {
		if o.IsZero() || o.After(local) {
			break
		}
		if closing := o.Add(w.duration); closing.After(local) && closing.After(until) {
			open, until = true, closing
		}
		o = w.cron.Next(o)
	}
	if open {
		return true, until
	}
	return false, w.cron.Next(local)
}

// maxCronOpenings bounds the openings cronWindowState looks at: one a minute for the longest
// window, and some to spare.
const maxCronOpenings = int(MaxWindowDuration/time.Minute) + 2

// windowReading is what the recorded side effect returns.
type windowReading struct {
	Open    bool      `json:"open"`
	Until   time.Time `json:"until"`
	Problem string    `json:"problem,omitempty"`
}

// pacer is the rollout's pacing state.
type pacer struct {
	s pacing
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

func newPacer(s pacing, carried *PacingProgress) pacer {
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
	return p.s.maxPerDomain == 0 || p.inFlight[domain] < p.s.maxPerDomain
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
	switch p.s.order {
	case OrderByLabel:
		sort.SliceStable(queue, func(i, j int) bool { return rankLess(queue[i], queue[j]) })
	case OrderSpread:
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

func (p *pacer) carried(queue []queuedNode) *PacingProgress {
	c := &PacingProgress{CanaryStage: p.canaryStage, CanaryNodes: p.canaries}
	for _, n := range queue {
		c.Queue = append(c.Queue, PacedNode{Name: n.name, Skip: n.skip, Domain: n.domain, Rank: n.rank})
	}
	return c
}

func restoredQueue(c *PacingProgress) []queuedNode {
	if c == nil {
		return nil
	}
	q := make([]queuedNode, 0, len(c.Queue))
	for _, n := range c.Queue {
		q = append(q, queuedNode{name: n.Name, skip: n.Skip, domain: n.Domain, rank: n.Rank})
	}
	return q
}

func (p *pacer) status() *PacingStatus {
	st := &PacingStatus{CanaryStage: p.canaryStage, Canaries: p.canaries, DomainKey: p.s.domainKey,
		MaxPerDomain: p.s.maxPerDomain, Order: p.s.order}
	if len(p.inFlight) > 0 {
		st.InFlightByDom = maps.Clone(p.inFlight)
	}
	if p.s.window != nil && !p.windowUntil.IsZero() {
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
	if p.s.maxPerDomain == 0 || len(p.inFlight) == 0 {
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
	return fmt.Sprintf("; in flight by %s (max %d): %s", p.s.domainKey, p.s.maxPerDomain, strings.Join(parts, " "))
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

// CheckTimeZone is the check of the window's time zone that the workflow makes when it first
// reads the window, for checking a request offline (starter validate); "" when fine.
func CheckTimeZone(req RolloutRequest) string {
	w := req.MaintenanceWindow
	if w == nil || w.TimeZone == "" {
		return ""
	}
	if _, err := time.LoadLocation(w.TimeZone); err != nil {
		return fmt.Sprintf("maintenanceWindow.timeZone: %q is not a known time zone; use an IANA name such as Europe/Berlin", w.TimeZone)
	}
	return ""
}

// readWindow reads the window's state at now. Loading a time zone reads the zone database
// (the worker embeds one, but the system's may differ between workers), so the answer is
// recorded as a side effect and replays identically.
func readWindow(ctx workflow.Context, w windowSpec, now time.Time) (windowReading, error) {
	var reading windowReading
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		loc, err := time.LoadLocation(w.zone)
		if err != nil {
			return windowReading{Problem: fmt.Sprintf("maintenanceWindow.timeZone: %q is not a known time zone (%v); use an IANA name such as Europe/Berlin", w.zone, err)}
		}
		open, until := windowState(w, loc, now)
		if !open && until.IsZero() {
			return windowReading{Problem: "maintenanceWindow: the window never opens again; give a schedule with openings to come"}
		}
		return windowReading{Open: open, Until: until}
	}).Get(&reading)
	if err == nil && reading.Problem != "" {
		err = temporal.NewNonRetryableApplicationError("invalid rollout request: "+reading.Problem, activities.ErrInvalidRequest, nil)
	}
	return reading, err
}

// checkWindow reads the window once before any node starts, so an unknown time zone fails
// the rollout at once.
func (r *rollout) checkWindow(ctx workflow.Context) error {
	if r.s.pace.window == nil {
		return nil
	}
	return r.refreshWindow(ctx)
}

func (r *rollout) refreshWindow(ctx workflow.Context) error {
	reading, err := readWindow(ctx, *r.s.pace.window, workflow.Now(ctx))
	if err != nil {
		return err
	}
	r.pace.windowOpen, r.pace.windowUntil = reading.Open, reading.Until
	return nil
}

// windowOpenNow says whether the last reading still says open (no window: always).
func (r *rollout) windowOpenNow(ctx workflow.Context) bool {
	return r.s.pace.window == nil || (r.pace.windowOpen && workflow.Now(ctx).Before(r.pace.windowUntil))
}

// awaitWindow returns once the maintenance window is open, sleeping on a durable timer until
// its next opening while it is closed. From versionStopWaits on it also returns as soon as
// stop says no node may start any more; the caller checks stop again.
func (r *rollout) awaitWindow(ctx workflow.Context, stop func() bool) error {
	if r.s.pace.window == nil {
		return nil
	}
	for !r.windowOpenNow(ctx) {
		if r.stopWaits && stop() {
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
		if r.stopWaits {
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
	if !r.s.pace.active() {
		return workflow.Await(ctx, func() bool { return (r.guarantees && r.noneMayStart()) || free() })
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
	if !r.s.pace.active() || len(q) == 0 {
		return q
	}
	r.p.Cursor = q[len(q)-1].name
	kept := q[:0]
	for _, n := range q {
		if r.pace.isCanary[n.name] {
			continue
		}
		if r.s.pace.domainKey != "" {
			n.domain = page.Labels[n.name][r.s.pace.domainKey]
		}
		if r.s.pace.orderLabel != "" {
			n.rank = page.Labels[n.name][r.s.pace.orderLabel]
		}
		kept = append(kept, n)
	}
	r.pace.order(kept)
	return kept
}

// runCanaries runs the canary nodes first, waits for their soak and approval, and fails the
// rollout if any canary failed. stop says the rollout ended here.
func (r *rollout) runCanaries(ctx workflow.Context) (stop bool, res RolloutResult, err error) {
	c := r.s.pace.canary
	if c == nil || r.pace.canaryStage == canaryStageDone {
		return false, RolloutResult{}, nil
	}
	// From versionAdmission on a run can continue as new in its canary stage; the next run
	// goes on with the canaries it was handed instead of listing them again.
	resumed := r.admission && r.pace.canaryStage == canaryStageRunning
	r.pace.canaryStage = canaryStageRunning
	if !resumed {
		if err := r.listCanaries(ctx); err != nil {
			if ctx.Err() != nil {
				res, err := r.cancelled(ctx)
				return true, res, err
			}
			return true, RolloutResult{}, err
		}
	}
	if r.admission {
		r.resumeWaiting(ctx)
	}
	failed := func() bool { return r.p.Counts.Failures() > 0 }
	historyFull := func() bool { return r.admission && r.historyNearLimits(ctx) }
	settled := func() bool { return r.inFlight == 0 && len(r.waiting) == 0 }
	continuing := false
	for len(r.queue) > 0 && !continuing {
		var ok bool
		var err error
		if r.admission {
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
			r.req.Name, result.Counts.Failures(), len(r.pace.canaries), strings.Join(names, ", ")), ErrCanaryFailed, nil, result)
	}
	if r.s.pace.soak > 0 {
		r.pace.canaryStage = canaryStageSoaking
		r.pace.soakUntil = workflow.Now(ctx).Add(r.s.pace.soak)
		r.showProgress(ctx)
		if err := workflow.Sleep(ctx, r.s.pace.soak); err != nil {
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
	return false, RolloutResult{}, nil
}

// listCanaries lists the canary nodes: by name, or the rollout's nodes that also match the
// canary selector.
func (r *rollout) listCanaries(ctx workflow.Context) error {
	c := r.s.pace.canary
	in := activities.ListNodesInput{
		Rollout:      r.req.Name,
		TemplateHash: r.p.TemplateHash,
		Rerun:        r.req.Rerun,
		Limit:        MaxCanaries,
		Labels:       r.s.pace.labelKeys(),
	}
	switch {
	case len(c.Nodes) > 0:
		in.Names = c.Nodes
		if r.admission {
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
			for page.More && len(page.Nodes)+len(page.Done) <= MaxCanaries {
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
			page.More = len(page.Nodes)+len(page.Done) > MaxCanaries
		}
	}
	if page.More {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"invalid rollout request: canary.selector: selects more than %d nodes; narrow it", MaxCanaries), activities.ErrInvalidRequest, nil)
	}
	if len(page.Unselected) > 0 {
		var ps []string
		for _, n := range page.Unselected {
			ps = append(ps, fmt.Sprintf("canary.nodes[%d]: %q is not selected by the rollout (nodeSelector %q, fieldSelector %q)",
				slices.Index(c.Nodes, n), n, r.req.NodeSelector, r.req.FieldSelector))
		}
		return temporal.NewNonRetryableApplicationError("invalid rollout request: "+strings.Join(ps, "; ")+
			"; canaries must be nodes of the rollout: correct the name or the selector", activities.ErrInvalidRequest, nil)
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
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove,
		func(ctx workflow.Context, _ ApproveRequest) (ApproveResult, error) {
			r.pace.approved = true
			r.showProgress(ctx)
			return ApproveResult{Canaries: len(r.pace.canaries)}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ApproveRequest) error {
			switch {
			case r.s.pace.canary == nil || !r.s.pace.canary.Approval:
				return errors.New("approve: this rollout has no approval gate (its request sets no canary.approval)")
			case r.pace.approved || r.pace.canaryStage == canaryStageDone:
				return errors.New("approve: already approved")
			case r.pace.canaryStage != canaryStageApproval:
				return fmt.Errorf("approve: the canaries have not finished yet (%s); approve when status says waiting for approval", r.pace.phaseWord())
			}
			return nil
		}})
}
