package main

import (
	"bytes"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
)

func TestValidateChecksPacingOffline(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+
		"maintenanceWindow: {days: [Sat, Sun], start: \"22:00\", duration: 4h, timeZone: Europe/Berlin}\n"+
		"topology: {key: topology.kubernetes.io/zone, maxPerDomain: 2}\n"+
		"canary: {selector: canary=true, soak: 30m, approval: true}\norder: {by: spread}\n"+goodTemplate)
	code, out, errOut := starter(t, "validate", "-f", good)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "valid")

	bad := writeFile(t, "bad.yaml", "name: kata\nnodeSelector: kata=true\n"+
		"maintenanceWindow: {cron: \"* * * * *\", duration: 25s, timeZone: Europe/Bärlin}\n"+
		"topology: {key: topology.kubernetes.io/zone, maxPerDomian: 2}\n"+goodTemplate)
	code, _, errOut = starter(t, "validate", "-f", bad)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `maintenanceWindow.timeZone: "Europe/Bärlin" is not a known time zone`)
	require.Contains(t, errOut, "topology.maxPerDomian")
}

func TestStatusShowsWindowCanariesAndDomains(t *testing.T) {
	opens := time.Date(2026, 3, 7, 21, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	printPacing(tw, &api.PacingStatus{WaitingFor: "window", WindowOpensAt: &opens,
		CanaryStage: "done", Canaries: []string{"web-1"},
		DomainKey: "topology.kubernetes.io/zone", MaxPerDomain: 2, InFlightByDom: map[string]int{"b": 1, "a": 2, "": 1}})
	require.NoError(t, tw.Flush())
	require.Equal(t, `WINDOW               waiting for window (opens 2026-03-07T21:00:00Z)
CANARIES             done (web-1)
IN FLIGHT BY DOMAIN  topology.kubernetes.io/zone: ""=1 a=2 b=1 (max 2 each)
`, b.String())
}

// With no node in flight, the domains' line says so rather than ending on a colon.
func TestStatusSaysNoDomainHasANodeInFlight(t *testing.T) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	printPacing(tw, &api.PacingStatus{DomainKey: "kubernetes.io/hostname", MaxPerDomain: 1})
	require.NoError(t, tw.Flush())
	require.Equal(t, "IN FLIGHT BY DOMAIN  kubernetes.io/hostname: none in flight (max 1 each)\n", b.String())
}

// While the canaries run, SELECTED counts only them: the status says so.
func TestStatusSaysTheCanariesAreAllThatIsListedYet(t *testing.T) {
	selectedLine := func(st api.RolloutStatus) string { return statusLine(st, "SELECTED") }
	st := api.RolloutStatus{Selected: 1, ListingDone: true, Pacing: &api.PacingStatus{CanaryStage: "awaiting approval", Canaries: []string{"can-0"}}}
	require.Equal(t, "SELECTED 1 (the canaries; the other nodes are listed once they pass)", selectedLine(st))
	st.Pacing.CanaryStage = "done"
	st.Selected = 4
	require.Equal(t, "SELECTED 4", selectedLine(st))
	st.ListingDone = false
	require.Equal(t, "SELECTED 4 so far (still listing)", selectedLine(st))
}
