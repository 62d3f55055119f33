package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits and words of the pacing fields, documented in README's request table.
const (
	MaxCanaries       = 100
	MaxWindowDuration = 7 * 24 * time.Hour
	MaxSoak           = 7 * 24 * time.Hour
	OrderByName       = "name"
	OrderByLabel      = "label"
	OrderSpread       = "spread"
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

// Pacing is the pacing part of a request's settings.
type Pacing struct {
	Window       *WindowSpec
	DomainKey    string
	MaxPerDomain int
	Canary       *Canary
	Soak         time.Duration
	Order        string
	OrderLabel   string
}

// Active says whether the request paces at all; without, the rollout runs as it always did.
func (p Pacing) Active() bool {
	return p.Window != nil || p.MaxPerDomain > 0 || p.Canary != nil || (p.Order != "" && p.Order != OrderByName)
}

// LabelKeys are the node labels ListNodes must report.
func (p Pacing) LabelKeys() []string {
	var keys []string
	if p.DomainKey != "" {
		keys = append(keys, p.DomainKey)
	}
	if p.OrderLabel != "" && p.OrderLabel != p.DomainKey {
		keys = append(keys, p.OrderLabel)
	}
	return keys
}

// WindowSpec is a parsed MaintenanceWindow.
type WindowSpec struct {
	days     [7]bool // by time.Weekday
	hour     int
	minute   int
	duration time.Duration
	Zone     string
	cron     cron.Schedule // instead of days and start
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// pacing is the request's pacing with its defaults.
func (r RolloutRequest) pacing() Pacing {
	p := Pacing{Order: OrderByName, Canary: r.Canary}
	if w := r.MaintenanceWindow; w != nil {
		p.Window = w.spec()
	}
	if t := r.Topology; t != nil {
		p.DomainKey, p.MaxPerDomain = t.Key, t.MaxPerDomain
	}
	if c := r.Canary; c != nil {
		p.Soak = canarySoakField.read(c.Soak)
	}
	if o := r.Order; o != nil {
		p.Order, p.OrderLabel = o.By, o.Label
		switch o.By {
		case "":
			p.Order = OrderByName
		case OrderSpread:
			if p.OrderLabel == "" {
				p.OrderLabel = p.DomainKey
			}
		}
	}
	return p
}

// checkPacing checks the pacing fields; it is deterministic (the time zone's existence is
// checked where it is loaded, see the workflow's readWindow).
func (r RolloutRequest) checkPacing(ps *problems) {
	if w := r.MaintenanceWindow; w != nil {
		w.check(ps)
	}
	if t := r.Topology; t != nil {
		if t.Key == "" {
			ps.add("topology.key", "is required", "name a node label such as topology.kubernetes.io/zone")
		} else if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			ps.add("topology.key", fmt.Sprintf("%q is not a label key (%s)", t.Key, strings.Join(errs, ", ")), "name a node label such as topology.kubernetes.io/zone")
		}
		if t.MaxPerDomain < 1 {
			ps.add("topology.maxPerDomain", fmt.Sprintf("must be at least 1, got %d", t.MaxPerDomain), "give the most nodes of one domain allowed in flight, e.g. 1")
		}
	}
	if c := r.Canary; c != nil {
		r.checkCanary(ps, c)
	}
	if o := r.Order; o != nil {
		switch o.By {
		case "", OrderByName:
			if o.Label != "" {
				ps.add("order.label", "is only for order.by label or spread", "remove it, or set order.by")
			}
		case OrderByLabel:
			if o.Label == "" {
				ps.add("order.label", "is required with order.by label", "name the node label whose value orders the nodes, e.g. rollout-priority")
			}
		case OrderSpread:
			if r.pacing().OrderLabel == "" {
				ps.add("order.label", "names no domain to spread over", "set order.label, or topology.key")
			}
		default:
			ps.add("order.by", fmt.Sprintf("%q is not an order", o.By), "use name, label or spread")
		}
		if o.Label != "" {
			if errs := validation.IsQualifiedName(o.Label); len(errs) > 0 {
				ps.add("order.label", fmt.Sprintf("%q is not a label key", o.Label), "name a node label")
			}
		}
	}
}

func (r RolloutRequest) checkCanary(ps *problems, c *Canary) {
	switch {
	case len(c.Nodes) > 0 && c.Selector != "":
		ps.add("canary.nodes", "is set together with canary.selector", "name the canaries or select them, not both")
	case len(c.Nodes) == 0 && c.Selector == "":
		ps.add("canary", "selects no canary", "set canary.nodes to node names or canary.selector to a label selector")
	}
	if len(c.Nodes) > MaxCanaries {
		ps.add("canary.nodes", fmt.Sprintf("lists %d names, more than %d", len(c.Nodes), MaxCanaries), "pick a few representative nodes")
	}
	inRequest := map[string]bool{}
	for _, n := range r.Nodes {
		inRequest[n] = true
	}
	for i, n := range c.Nodes {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			ps.add(fmt.Sprintf("canary.nodes[%d]", i), fmt.Sprintf("%q is not a valid node name", n), "node names are DNS-1123 subdomains")
		} else if len(r.Nodes) > 0 && !inRequest[n] {
			ps.add(fmt.Sprintf("canary.nodes[%d]", i), fmt.Sprintf("%q is not one of nodes", n), "canaries must be nodes of the rollout")
		}
	}
	if c.Selector != "" {
		//workflowcheck:ignore
		if _, err := labels.Parse(c.Selector); err != nil {
			ps.add("canary.selector", fmt.Sprintf("%q does not parse: %v", c.Selector, err), "write a label selector such as \"canary=true\"")
		}
	}
	canarySoakField.check(ps, c.Soak)
}

// spec is the window parsed; what does not parse is left at its zero value (a problem that
// check reports).
func (w MaintenanceWindow) spec() *WindowSpec {
	s := &WindowSpec{Zone: w.TimeZone, duration: windowDurationField.read(w.Duration)}
	if s.Zone == "" {
		s.Zone = "UTC"
	}
	if w.Cron != "" {
		s.cron, _ = cron.ParseStandard(w.Cron)
		return s
	}
	if len(w.Days) == 0 {
		s.days = [7]bool{true, true, true, true, true, true, true}
	}
	for _, d := range w.Days {
		if wd, ok := weekday(d); ok {
			s.days[wd] = true
		}
	}
	s.hour, s.minute, _ = timeOfDay(w.Start)
	return s
}

// weekday reads a day of the week by its name or its first three letters, in any case.
func weekday(d string) (time.Weekday, bool) {
	wd, ok := weekdays[strings.ToLower(d[:min(3, len(d))])]
	return wd, ok && (len(d) <= 3 || strings.HasPrefix(strings.ToLower(wd.String()), strings.ToLower(d)))
}

// timeOfDay reads HH:MM.
func timeOfDay(start string) (h, m int, ok bool) {
	hh, mm, ok := strings.Cut(start, ":")
	h, herr := strconv.Atoi(hh)
	m, merr := strconv.Atoi(mm)
	return h, m, ok && herr == nil && merr == nil && h >= 0 && h <= 23 && m >= 0 && m <= 59 && len(mm) == 2
}

func (w MaintenanceWindow) check(ps *problems) {
	windowDurationField.check(ps, w.Duration)
	if w.Duration == "" {
		ps.add("maintenanceWindow.duration", "is required", "write how long the window stays open, e.g. \"4h\"")
	}
	if zone := w.spec().Zone; strings.ContainsAny(zone, " \\") || strings.HasPrefix(zone, "/") || strings.Contains(zone, "..") {
		ps.add("maintenanceWindow.timeZone", fmt.Sprintf("%q is not an IANA time zone name", w.TimeZone), "use a name such as Europe/Berlin or UTC")
	}
	if w.Cron != "" {
		if w.Start != "" || len(w.Days) > 0 {
			ps.add("maintenanceWindow.cron", "is set together with start/days", "give either a cron expression or days and start")
		}
		sched, err := cron.ParseStandard(w.Cron)
		switch {
		case err != nil || strings.Contains(w.Cron, "TZ="):
			ps.add("maintenanceWindow.cron", fmt.Sprintf("%q is not a five-field cron expression (%v)", w.Cron, err), "write e.g. \"0 22 * * 6\" (Saturdays 22:00); the zone goes in timeZone")
		case isConstantDelay(sched):
			ps.add("maintenanceWindow.cron", fmt.Sprintf("%q has no fixed opening: @every counts from whenever the window is read, so it never opens", w.Cron),
				"write the openings as a five-field cron expression, e.g. \"0 * * * *\" (every hour on the hour)")
		case sched.Next(cronCheckFrom).IsZero():
			ps.add("maintenanceWindow.cron", fmt.Sprintf("%q never matches a date (such as 30 February), so the window never opens", w.Cron),
				"name a day that exists, e.g. \"0 0 28 2 *\"")
		}
		return
	}
	for i, d := range w.Days {
		if _, ok := weekday(d); !ok {
			ps.add(fmt.Sprintf("maintenanceWindow.days[%d]", i), fmt.Sprintf("%q is not a day of the week", d), "use Mon, Tue, Wed, Thu, Fri, Sat or Sun")
		}
	}
	if _, _, ok := timeOfDay(w.Start); !ok {
		ps.add("maintenanceWindow.start", fmt.Sprintf("%q is not a time of day", w.Start), "write it as HH:MM in the window's time zone, e.g. \"22:00\"")
	}
}

// cronCheckFrom is where validation looks for a cron window's first opening: a fixed time
// keeps validation deterministic, and the parser looks five years ahead, which every date that
// exists (29 February included) falls within.
var cronCheckFrom = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

func isConstantDelay(s cron.Schedule) bool {
	_, ok := s.(cron.ConstantDelaySchedule)
	return ok
}

// WindowState says whether the window is open at now and when that next changes: the end of
// the opening now falls in, or the next opening. Openings are computed on the local calendar
// of the zone, so a window at 09:00 opens at 09:00 local time on both sides of a DST change;
// the duration is elapsed time.
func WindowState(w WindowSpec, loc *time.Location, now time.Time) (open bool, until time.Time) {
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

// cronWindowState is WindowState for a cron window: open while an opening in the last
// duration is not over.
//
// The loop is bounded: a five-field expression opens at most once a minute, so a window of at
// most MaxWindowDuration has at most maxCronOpenings openings that can still be open; a
// schedule with no next opening (zero) ends it, and reads as closed with a zero until.
func cronWindowState(w WindowSpec, loc *time.Location, now time.Time) (open bool, until time.Time) {
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
