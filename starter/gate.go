package main

import (
	"fmt"
	"io"
	"time"

	"github.com/noderollout/noderollout/api"
)

// printGate adds the metric gate's line to the status table: whether it holds the rollout,
// since when, and why.
func printGate(w io.Writer, g *api.GateState) {
	if g == nil {
		return
	}
	state := "open"
	switch {
	case !g.Asked:
		state = "closed (Prometheus has not answered yet)"
	case !g.Open:
		state = "CLOSED: the rollout paused itself"
	}
	fmt.Fprintf(w, "METRIC GATE\t%s since %s, closed %d time(s)\n", state, g.Since.Format(time.RFC3339), g.Closings)
	if g.Reason != "" {
		fmt.Fprintf(w, "GATE REASON\t%s\n", g.Reason)
	}
}
