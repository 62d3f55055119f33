package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// What the Temporal server compiles, the starter lets through, down to the obscure forms: a
// check stricter than the server would block a schedule that works.
func TestCheckCronAcceptsWhatTheServerAccepts(t *testing.T) {
	for _, expr := range []string{
		"0 3 * * *",
		"  0 3 * * *  ",
		"0\t3 * *  * *",
		"*/15 * * * *",
		"5/10 * * * *",
		"1-30/5,45 * * * *",
		"00 03 * * +1",
		"0 3 * * 1-5",
		"0 3 * * MON-FRI",
		"0 3 * * mo,we,Friday",
		"0 3 * * 7",
		"0 3 * * 0-7",
		"0 3 * * 3-7/2",
		"0 3 1 jan *",
		"0 3 1 January-Mar *",
		"0 3 31 2 *",
		"0 3 * * * 2030",
		"0 3 * * * 2026-2030/2",
		"30 0 3 * * * *",
		"@daily",
		"@annually",
		"@midnight",
		"@hourly # every hour",
		"0 3 * * * # nightly, after the backups",
		"CRON_TZ=Europe/Berlin 0 3 * * *",
		"TZ=America/New_York @weekly",
		"TZ= 0 3 * * *",
		"@every 1s",
		"@every 90m",
		"@every 1d",
		"@every 1.5d",
		"@every 1h/15m",
		"@every 1d/0s",
		"@every 24h # daily",
		"@every 1h/",
	} {
		require.NoError(t, checkCron(expr), expr)
	}
}

// Each refused expression names the flag, what is wrong, and a fix with an example.
func TestCheckCronRefusesWhatTheServerRefuses(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"CRON_TZ=Mars/Olympus 0 3 * * *", `time zone "Mars/Olympus" is not an IANA zone name`},
		{"0 3 * *", "4 field(s)"},
		{"every day", "2 field(s)"},
		{"   ", "0 field(s)"},
		{"0 3 * * * * * *", "8 field(s)"},
		{"@reboot", "1 field(s)"},
		{"61 * * * *", "minute 61 is outside 0-59"},
		{"0 24 * * *", "hour 24 is outside 0-23"},
		{"0 3 0 * *", "day-of-month 0 is outside 1-31"},
		{"0 3 * 13 *", "month 13 is outside 1-12"},
		{"0 3 * * 8", "day-of-week 8 is outside 0-7"},
		{"0 3 * * * 1999", "year 1999 is outside 2000-2100"},
		{"60 0 3 * * * *", "second 60 is outside 0-59"},
		{"0 3 * * ?", `day-of-week "?" is not a number 0-7 or a name of 2 letters or more (su, ...)`},
		{"0 3 L * *", `day-of-month "L" is not a number`},
		{"0 3 * ja *", `month "ja" is not a number 1-12 or a name of 3 letters or more (jan, ...)`},
		{"0 3 * * s", `day-of-week "s" is not a number`},
		{"0 3 * * fri-mon", `day-of-week range "fri-mon" ends before it starts`},
		{"0 3 * * -1", `day-of-week "" is not a number`},
		{"1,,2 * * * *", `minute "" is not a number`},
		{"1-2-3 * * * *", `minute "2-3" is not a number`},
		{"*/0 * * * *", `minute "*/0": the step after / must be a whole number, 1 or more`},
		{"1/2/3 * * * *", `minute "1/2/3": the step after / must be a whole number`},
		{"TZ=UTC", "a time zone with nothing after it"},
		{"0 3 * * * # " + strings.Repeat("x", 201), "the comment after # has 201 bytes, more than the 200"},
		{"@every", "@every needs an interval after a space"},
		{"@everyday", "@every needs an interval after a space"},
		{"@every 500ms", "the interval 500ms is under 1s"},
		{"@every 1 h", `"1 h" is not a duration`},
		{"@every  1h", `" 1h" is not a duration`},
		{"@every 1h/1h", "the phase 1h0m0s after / must be at least 0 and under the interval 1h0m0s"},
		{"@every 1h/-1m", "the phase -1m0s after / must be at least 0"},
		{"@every 1h/x", `"x" is not a duration`},
	} {
		err := checkCron(c.expr)
		require.Error(t, err, c.expr)
		require.True(t, errors.As(err, new(usageError)), "%q: exit 2, not %T", c.expr, err)
		msg := err.Error()
		require.True(t, strings.HasPrefix(msg, "--cron "), "%q: names the flag: %s", c.expr, msg)
		require.Contains(t, msg, c.want, c.expr)
		require.Contains(t, msg, "e.g.", "%q: gives an example that works: %s", c.expr, msg)
	}
}

func TestCheckEveryRefusesUnderOneSecond(t *testing.T) {
	for _, c := range []struct {
		every time.Duration
		want  string // "" when accepted
	}{
		{time.Second, ""},
		{1500 * time.Millisecond, ""},
		{24 * time.Hour, ""},
		{999 * time.Millisecond, "--every must be at least 1s, the shortest interval a Temporal Schedule takes, got 999ms; give e.g. --every 1m"},
		{time.Nanosecond, "--every must be at least 1s, the shortest interval a Temporal Schedule takes, got 1ns"},
		{-time.Hour, "--every -1h0m0s is negative; give the interval between runs, e.g. --every 24h"},
	} {
		err := checkEvery(c.every)
		if c.want == "" {
			require.NoError(t, err, c.every)
			continue
		}
		require.True(t, errors.As(err, new(usageError)), "%s: exit 2, not %T", c.every, err)
		require.Contains(t, err.Error(), c.want)
	}
}

// A spec the server would refuse exits 2 on the command line, before dialling.
func TestScheduleCreateRefusesABadSpecBeforeDialling(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	for _, c := range []struct{ flag, value, want string }{
		{"--every", "500ms", "--every must be at least 1s, the shortest interval a Temporal Schedule takes, got 500ms"},
		{"--cron", "0 3 * *", `--cron "0 3 * *": 4 field(s)`},
		{"--cron", "61 * * * *", "minute 61 is outside 0-59"},
		{"--cron", "every day", `e.g. --cron "0 3 * * *"`},
	} {
		code, _, errOut := starter(t, "schedule", "create", "nightly", "-f", good, c.flag, c.value)
		require.Equal(t, 2, code, errOut)
		require.NotContains(t, errOut, "temporal at", "a bad %s must not dial", c.flag)
		require.Contains(t, errOut, c.want)
	}
	// A good spec gets past the checks to the server, which is not there.
	code, _, errOut := starter(t, "schedule", "create", "nightly", "-f", good, "--cron", "0 3 * * mon-fri")
	require.Equal(t, 1, code, errOut)
}
