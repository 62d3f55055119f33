package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/noderollout/noderollout/api/didyoumean"
)

// The checks in this file refuse, before any request, the --cron and --every values the
// Temporal server would refuse when it compiles the Schedule's spec, so the operator reads
// which flag is wrong and an example that works rather than the server's terse wording.
// They mirror the server's rules as read in temporalio/temporal, service/worker/scheduler:
// calendar.go (parseCronString and the field parser it calls) and spec.go (the calendar
// ranges, the interval and phase checks). In words:
//
//   - An interval is at least one second; a phase is at least zero and less than its interval.
//   - A cron string may start with "TZ=zone " or "CRON_TZ=zone " (cut at the first space) and
//     end in "# comment" (all from the first #; at most 200 bytes for a calendar).
//   - "@every INTERVAL[/PHASE]" is an interval: Go durations plus a unit "d" of 24 h; an empty
//     PHASE is none.
//   - @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly, exactly.
//   - Otherwise 5 fields (minute hour day-of-month month day-of-week), 6 (+ year) or 7
//     (second first, + year), split on white space. A field is a comma list of *, N or N-M,
//     each with an optional /STEP (STEP at least 1; N/STEP runs to the field's end, M >= N).
//     Months may be names of 3 letters or more (jan, January), days of the week of 2 or more
//     (mo, Mon); case does not matter; day of week 7 is Sunday, as 0 is. No ?, L or W.
//
// The zone's name is looked up in the starter's own zone database (time/tzdata, embedded): a
// misspelt zone is refused before dialling, which the server would refuse too.

// minScheduleInterval is the server's shortest interval.
const minScheduleInterval = time.Second

// maxCronComment is the longest comment the server keeps with a calendar.
const maxCronComment = 200

const (
	cronFix  = `give minute hour day-of-month month day-of-week, e.g. --cron "0 3 * * *" (03:00 every day), --cron "30 2 * * mon-fri", --cron @daily`
	everyFix = `give an interval of 1s or more and a phase under it, e.g. --cron "@every 12h" or --cron "@every 1h/15m"`
)

// cronField is one field of a cron string: its range and the names it also takes.
type cronField struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i, matched by a prefix of at least minName letters
	minName  int
}

var (
	cronSecond     = cronField{name: "second", max: 59}
	cronMinute     = cronField{name: "minute", max: 59}
	cronHour       = cronField{name: "hour", max: 23}
	cronDayOfMonth = cronField{name: "day-of-month", min: 1, max: 31}
	cronMonth      = cronField{name: "month", min: 1, max: 12, minName: 3, names: []string{
		"january", "february", "march", "april", "may", "june", "july", "august",
		"september", "october", "november", "december"}}
	cronDayOfWeek = cronField{name: "day-of-week", max: 7, minName: 2, names: []string{
		"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}}
	cronYear = cronField{name: "year", min: 2000, max: 2100}

	// cronLayouts are the fields of a cron string by how many it has.
	cronLayouts = map[int][]cronField{
		5: {cronMinute, cronHour, cronDayOfMonth, cronMonth, cronDayOfWeek},
		6: {cronMinute, cronHour, cronDayOfMonth, cronMonth, cronDayOfWeek, cronYear},
		7: {cronSecond, cronMinute, cronHour, cronDayOfMonth, cronMonth, cronDayOfWeek, cronYear},
	}

	// cronShorthands are the @-words the server takes in place of the fields.
	cronShorthands = map[string]bool{"@yearly": true, "@annually": true, "@monthly": true,
		"@weekly": true, "@daily": true, "@midnight": true, "@hourly": true}
)

// checkEvery refuses an --every the server would refuse.
func checkEvery(every time.Duration) error {
	switch {
	case every < 0:
		return usageError{fmt.Sprintf("--every %s is negative; give the interval between runs, e.g. --every 24h", every)}
	case every < minScheduleInterval:
		return usageError{fmt.Sprintf("--every must be at least %s, the shortest interval a Temporal Schedule takes, got %s; give e.g. --every 1m or --every 24h", minScheduleInterval, every)}
	}
	return nil
}

// checkCron refuses a --cron the server would refuse.
func checkCron(expr string) error {
	if err := cronProblem(expr); err != nil {
		return usageError{fmt.Sprintf("--cron %q: %v", expr, err)}
	}
	return nil
}

// cronProblem is what the server would find wrong with a cron string, with the fix; nil if
// nothing.
func cronProblem(expr string) error {
	body, err := cutZone(strings.TrimSpace(expr))
	if err != nil {
		return err
	}
	body, comment, _ := strings.Cut(body, "#")
	body, comment = strings.TrimSpace(body), strings.TrimSpace(comment)
	if strings.HasPrefix(body, "@every") {
		return everyProblem(body)
	}
	if len(comment) > maxCronComment {
		return fmt.Errorf("the comment after # has %d bytes, more than the %d a Schedule keeps; shorten it, e.g. --cron \"0 3 * * * # nightly\"", len(comment), maxCronComment)
	}
	if cronShorthands[body] {
		return nil
	}
	return fieldsProblem(strings.Fields(body))
}

// cutZone drops a leading TZ= or CRON_TZ=, as the server splits it off: at the first space.
func cutZone(expr string) (string, error) {
	if !strings.HasPrefix(expr, "TZ=") && !strings.HasPrefix(expr, "CRON_TZ=") {
		return expr, nil
	}
	zone, rest, found := strings.Cut(expr, " ")
	if !found {
		return "", fmt.Errorf("a time zone with nothing after it; %s", cronFix)
	}
	_, zone, _ = strings.Cut(zone, "=")
	if err := checkZone(zone); err != nil {
		return "", err
	}
	return rest, nil
}

// checkZone refuses a time zone the starter's zone database (embedded, time/tzdata) does not
// have. The server's is Go's too; a zone only a newer database has is rare enough that a
// typo is the likelier cause.
func checkZone(zone string) error {
	// "" is UTC to the server as to time.LoadLocation; "Local" is the server's own zone.
	if _, err := time.LoadLocation(zone); err == nil && zone != "Local" {
		return nil
	}
	return fmt.Errorf("time zone %q is not an IANA zone name%s; write e.g. CRON_TZ=Europe/Berlin or CRON_TZ=UTC", zone, didyoumean.Hint(zone, zoneNames()))
}

// fieldsProblem checks the fields of a cron string, left to right.
func fieldsProblem(fields []string) error {
	layout, ok := cronLayouts[len(fields)]
	if !ok {
		return fmt.Errorf("%d field(s); Temporal takes 5, 6 (+ year) or 7 (second first, + year), or @hourly, @daily, @weekly, @monthly, @yearly; %s", len(fields), cronFix)
	}
	for i, f := range layout {
		if err := f.check(fields[i]); err != nil {
			return fmt.Errorf("%v; %s", err, cronFix)
		}
	}
	return nil
}

// check checks one field: a comma list of *, N or N-M, each with an optional /STEP.
func (f cronField) check(field string) error {
	for _, part := range strings.Split(field, ",") {
		if err := f.checkPart(part); err != nil {
			return err
		}
	}
	return nil
}

func (f cronField) checkPart(part string) error {
	body, step, hasStep := strings.Cut(part, "/")
	if hasStep {
		if n, err := strconv.Atoi(step); err != nil || n < 1 {
			return fmt.Errorf("%s %q: the step after / must be a whole number, 1 or more", f.name, part)
		}
	}
	if body == "*" {
		return nil
	}
	first, last, isRange := strings.Cut(body, "-")
	if !isRange {
		_, err := f.value(body)
		return err
	}
	start, err := f.value(first)
	if err != nil {
		return err
	}
	end, err := f.value(last)
	if err != nil {
		return err
	}
	if end < start {
		return fmt.Errorf("%s range %q ends before it starts (write the smaller value first)", f.name, body)
	}
	return nil
}

// value reads one value of the field: a number in its range, or a name it takes.
func (f cronField) value(s string) (int, error) {
	if len(f.names) > 0 && len(s) >= f.minName {
		lower := strings.ToLower(s)
		for i, name := range f.names {
			if strings.HasPrefix(name, lower) {
				return f.min + i, nil
			}
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a number%s", f.name, s, f.namesHint())
	}
	if n < f.min || n > f.max {
		return 0, fmt.Errorf("%s %d is outside %d-%d", f.name, n, f.min, f.max)
	}
	return n, nil
}

func (f cronField) namesHint() string {
	if len(f.names) == 0 {
		return ""
	}
	return fmt.Sprintf(" %d-%d or a name of %d letters or more (%s, ...)", f.min, f.max, f.minName, f.names[0][:f.minName])
}

// everyProblem checks "@every INTERVAL[/PHASE]" as the server reads it: the interval is all
// after the first space.
func everyProblem(body string) error {
	_, spec, found := strings.Cut(body, " ")
	if !found {
		return fmt.Errorf("@every needs an interval after a space; %s", everyFix)
	}
	intervalText, phaseText, hasPhase := strings.Cut(spec, "/")
	interval, err := scheduleDuration(intervalText)
	if err != nil {
		return err
	}
	if interval < minScheduleInterval {
		return fmt.Errorf("the interval %s is under %s, the shortest a Temporal Schedule takes; %s", interval, minScheduleInterval, everyFix)
	}
	if !hasPhase || phaseText == "" {
		return nil
	}
	phase, err := scheduleDuration(phaseText)
	if err != nil {
		return err
	}
	if phase < 0 || phase >= interval {
		return fmt.Errorf("the phase %s after / must be at least 0 and under the interval %s; %s", phase, interval, everyFix)
	}
	return nil
}

// dayUnit is a decimal number with the unit d, which the server reads as that many 24 h days.
var dayUnit = regexp.MustCompile(`([0-9]+(\.[0-9]*)?|\.[0-9]+)d`)

// scheduleDuration reads a duration as the server does: Go's, plus the unit d.
func scheduleDuration(s string) (time.Duration, error) {
	inHours := dayUnit.ReplaceAllStringFunc(s, func(days string) string {
		n, err := strconv.ParseFloat(strings.TrimSuffix(days, "d"), 64)
		if err != nil {
			return days
		}
		return fmt.Sprintf("%fh", 24*n)
	})
	d, err := time.ParseDuration(inHours)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (a number and a unit s, m, h or d, e.g. 90m or 1d); %s", s, everyFix)
	}
	return d, nil
}

// zoneTables are where the system lists its zones, for a did-you-mean; absent, there is none.
var zoneTables = []string{"/usr/share/zoneinfo/zone1970.tab", "/usr/share/zoneinfo/zone.tab"}

// zoneNames are the zone names the system lists, and UTC.
func zoneNames() []string {
	names := []string{"UTC"}
	for _, table := range zoneTables {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && !strings.HasPrefix(f[0], "#") {
				names = append(names, f[2])
			}
		}
		return names
	}
	return names
}
