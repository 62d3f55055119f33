package api

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/stretchr/testify/require"
)

func TestWindowStateAcrossDaylightSavingChanges(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	every := [7]bool{true, true, true, true, true, true, true}
	for _, tc := range []struct {
		name  string
		w     WindowSpec
		loc   *time.Location
		now   string
		open  bool
		until string
	}{
		{"before spring forward", WindowSpec{days: every, hour: 9, duration: time.Hour}, berlin, "2026-03-28T08:30:00Z", true, "2026-03-28T09:00:00Z"},
		{"next opening is after spring forward", WindowSpec{days: every, hour: 9, duration: time.Hour}, berlin, "2026-03-28T09:00:00Z", false, "2026-03-29T07:00:00Z"},
		{"night window spanning the fall back lasts its elapsed duration", WindowSpec{days: every, hour: 1, duration: 2 * time.Hour}, ny, "2026-11-01T06:30:00Z", true, "2026-11-01T07:00:00Z"},
		{"fall back: 09:00 local is 14:00 UTC", WindowSpec{days: every, hour: 9, duration: time.Hour}, ny, "2026-10-31T14:00:00Z", false, "2026-11-01T14:00:00Z"},
		{"weekend only, from a Wednesday", WindowSpec{days: [7]bool{time.Saturday: true}, hour: 22, duration: 4 * time.Hour}, berlin, "2026-03-25T12:00:00Z", false, "2026-03-28T21:00:00Z"},
		{"open across midnight", WindowSpec{days: [7]bool{time.Saturday: true}, hour: 22, duration: 4 * time.Hour}, berlin, "2026-03-28T23:30:00Z", true, "2026-03-29T01:00:00Z"},
		{"cron: next opening is after spring forward", cronSpec(t, "0 9 * * *", time.Hour), berlin, "2026-03-28T09:00:00Z", false, "2026-03-29T07:00:00Z"},
		{"cron: open", cronSpec(t, "0 9 * * *", time.Hour), berlin, "2026-03-29T07:59:59Z", true, "2026-03-29T08:00:00Z"},
		{"cron: every minute for 25s, open", cronSpec(t, "* * * * *", 25*time.Second), berlin, "2026-03-29T07:00:24Z", true, "2026-03-29T07:00:25Z"},
		{"cron: every minute for 25s, closed", cronSpec(t, "* * * * *", 25*time.Second), berlin, "2026-03-29T07:00:25Z", false, "2026-03-29T07:01:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open, until := WindowState(tc.w, tc.loc, utc(tc.now))
			require.Equal(t, tc.open, open)
			require.Equal(t, utc(tc.until), until.UTC())
		})
	}
}

func cronSpec(t *testing.T, expr string, d time.Duration) WindowSpec {
	w := MaintenanceWindow{Cron: expr, Duration: d.String()}
	var ps problems
	w.check(&ps)
	require.Empty(t, ps)
	return *w.spec()
}

// neverSchedule is a schedule with no next opening, as robfig/cron answers for 30 February.
type neverSchedule struct{}

func (neverSchedule) Next(time.Time) time.Time { return time.Time{} }

// Window code cannot loop without bound: a schedule with no opening reads as closed for good
// (the workflow then fails the rollout with InvalidRequest), at once.
func TestCronWindowStateStopsOnAScheduleThatNeverOpens(t *testing.T) {
	done := make(chan struct{})
	var open bool
	var until time.Time
	go func() {
		open, until = cronWindowState(WindowSpec{cron: neverSchedule{}, duration: time.Hour}, time.UTC, time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("cronWindowState is still looping after 5 s")
	}
	require.False(t, open)
	require.True(t, until.IsZero())
}
