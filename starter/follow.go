package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/noderollout/noderollout/api"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/term"
)

// followInterval is how often --wait and status -w look at the rollout: a describe, which
// Temporal does not bill, tells how many nodes are in flight.
var followInterval = 2 * time.Second

// followQueryInterval is how often they ask the rollout for its full status: a query is a
// Temporal action (Temporal Cloud bills it), so following a rollout costs at most one a
// minute, however long it runs; the counts of finished nodes are at most that old, the nodes
// in flight live.
var followQueryInterval = time.Minute

// follow prints progress until the rollout ends, then its result; it returns an error when
// the rollout did not succeed, or selected no node without --allow-empty, so the exit code
// says so. With -o json|yaml it prints only the ended rollout's view.
//
// On a terminal the progress is one line redrawn in place, fitted to the terminal's width
// each time (the window may have been resized). Anywhere else (a pipe, a CI log) it is one
// line per change of the counts or the phase, with the time since the start: no carriage
// return or escape sequence, and nothing while nothing changes.
func (a *app) follow(id string) error {
	tty, _ := terminal(a.out)
	quiet := a.forMachines()
	done := make(chan struct{})
	var res api.RolloutResult
	var runErr error
	go func() {
		res, runErr = a.result(id)
		close(done)
	}()
	started := time.Now()
	ticker := time.NewTicker(followInterval)
	defer ticker.Stop()
	drawn, last := false, ""
	var st api.RolloutStatus
	var asked time.Time // when the last query answered; zero: none has
	for {
		select {
		case <-done:
			return a.ended(id, res, runErr, tty && drawn)
		case <-a.ctx.Done():
			if tty && drawn {
				fmt.Fprintln(a.out)
			}
			return a.ctx.Err()
		case <-ticker.C:
			if quiet {
				continue
			}
			if asked.IsZero() || time.Since(asked) >= followQueryInterval {
				fresh, err := queryStatus[api.RolloutStatus](a, id)
				if err != nil {
					continue // between runs of a continue-as-new, or the worker is restarting
				}
				st, asked = fresh, time.Now()
			} else if inFlight, ok := a.nodesInFlight(id); ok {
				st.Counts.Running = inFlight
			}
			if tty {
				_, width := terminal(a.out)
				fmt.Fprintf(a.out, "\r\033[K%s", progressLine(st, time.Since(started), width))
				drawn = true
				continue
			}
			if line := changeLine(st); line != last {
				fmt.Fprintf(a.out, "[%s] %s\n", time.Since(started).Round(time.Second), line)
				last = line
			}
		}
	}
}

// nodesInFlight is how many node workflows the rollout's current run has running (its pending
// children), from a describe: no Temporal action.
func (a *app) nodesInFlight(id string) (int, bool) {
	desc, err := a.tc.DescribeWorkflow(a.ctx, id, "")
	if err != nil || desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || desc.RawResponse == nil {
		return 0, false
	}
	return len(desc.RawResponse.GetPendingChildren()), true
}

// changeLine is the progress that is worth a line of its own when it changes: the counts and
// the phase, not the rate or the ETA, which change every time.
func changeLine(st api.RolloutStatus) string {
	c := st.Counts
	done := c.Finished()
	line := fmt.Sprintf("%d/%d done, %d failed, %d in flight", done, max(st.Selected, done), c.Failures(), c.Running)
	if c.Waiting > 0 {
		line += fmt.Sprintf(", %d waiting", c.Waiting)
	}
	return line + " (" + st.Phase + ")"
}

// summaryLine is the last line of a rollout that ended well. It names the skipped nodes when
// there are any: a re-run that skips every node (already done at this template) succeeds on 0
// nodes, which without the reason reads like a rollout that did nothing.
func summaryLine(res api.RolloutResult) string {
	line := fmt.Sprintf("rollout %s: %d/%d nodes succeeded, %d failed", res.Name, res.Counts.Succeeded, res.Selected, res.Counts.Failures())
	if res.Counts.Skipped > 0 {
		line += fmt.Sprintf(", %d skipped (already done at this template, a taint, or blocking Pods)", res.Counts.Skipped)
	}
	return line
}

// ended prints the ended rollout and decides the exit code.
func (a *app) ended(id string, res api.RolloutResult, runErr error, endLine bool) error {
	status := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	switch {
	case temporal.IsCanceledError(runErr):
		status = enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED
	case runErr != nil:
		status = enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	}
	// Only start --wait says that an empty rollout failed: there it is what was just asked for.
	empty := runErr == nil && res.Selected == 0 && a.cmd.Flags().Lookup("allow-empty") != nil && !a.flagBool("allow-empty")
	err := a.print(endedView(id, status, res, runErr), func(w io.Writer) error {
		if endLine {
			fmt.Fprintln(w)
		}
		printResult(w, res)
		if runErr == nil && !empty {
			fmt.Fprintln(w, summaryLine(res))
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case runErr != nil:
		return runError{fmt.Errorf("rollout %s failed: %w", id, runErr)}
	case empty:
		return runError{fmt.Errorf("rollout %s selected 0 nodes: check the selector or the node names (kubectl get nodes -l SELECTOR); nothing ran. Pass --allow-empty if that is expected", res.Name)}
	}
	return nil
}

// rolloutView is what status and start --wait print with -o json|yaml: one shape whether
// the rollout runs or has ended.
type rolloutView struct {
	WorkflowID string `json:"workflowId"`
	// Status is the workflow's: Running, Completed, Failed, Canceled, Terminated, TimedOut.
	Status string `json:"status"`
	// Phase is running, paused, a pacing wait or draining while it runs, and done once it ended.
	Phase        string     `json:"phase"`
	Name         string     `json:"name"`
	TemplateHash string     `json:"templateHash"`
	Parallelism  int        `json:"parallelism,omitempty"`
	Window       int        `json:"window,omitempty"`
	Selected     int        `json:"selected"`
	ListingDone  bool       `json:"listingDone"`
	Counts       api.Counts `json:"counts"`
	Waiting      []string   `json:"waiting,omitempty"`
	// WaitingForClusterSlot and Pacing are what the table shows of a running rollout.
	WaitingForClusterSlot []string            `json:"waitingForClusterSlot,omitempty"`
	Pacing                *api.PacingStatus   `json:"pacing,omitempty"`
	Gate                  *api.GateState      `json:"gate,omitempty"`
	Converge              *api.ConvergeStatus `json:"converge,omitempty"`
	Recent                []api.NodeResult    `json:"recent,omitempty"`
	Failures              []api.NodeResult    `json:"failures,omitempty"`
	ContinuedAsNew        int                 `json:"continuedAsNew"`
	StartedAt             time.Time           `json:"startedAt"`
	FinishedAt            *time.Time          `json:"finishedAt,omitempty"`
	Error                 string              `json:"error,omitempty"`
	// Requester and Reason come from the memo the starter wrote; empty when started otherwise.
	Requester string `json:"requester,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// InFlight is each running node's step (status only); InFlightError why it is missing.
	InFlight      []nodeStep `json:"inFlight,omitempty"`
	InFlightError string     `json:"inFlightError,omitempty"`
}

func runningView(id string, st api.RolloutStatus) rolloutView {
	return rolloutView{
		WorkflowID: id, Status: "Running", Phase: st.Phase, Name: st.Name, TemplateHash: st.TemplateHash,
		Parallelism: st.Parallelism, Window: st.Window, Selected: st.Selected, ListingDone: st.ListingDone,
		Counts: st.Counts, Waiting: st.Waiting, WaitingForClusterSlot: st.WaitingForClusterSlot, Pacing: st.Pacing, Gate: st.Gate, Converge: st.Converge,
		Recent: st.Recent, Failures: st.Failures,
		ContinuedAsNew: st.ContinuedAsNew, StartedAt: st.StartedAt,
	}
}

func endedView(id string, status enumspb.WorkflowExecutionStatus, res api.RolloutResult, runErr error) rolloutView {
	v := rolloutView{
		WorkflowID: id, Status: strings.TrimPrefix(status.String(), "WorkflowExecutionStatus"), Phase: "done",
		Name: res.Name, TemplateHash: res.TemplateHash, Selected: res.Selected, ListingDone: true,
		Counts: res.Counts, Failures: res.Failures, ContinuedAsNew: res.ContinuedAsNew, StartedAt: res.StartedAt,
	}
	if !res.FinishedAt.IsZero() {
		f := res.FinishedAt
		v.FinishedAt = &f
	}
	if runErr != nil {
		v.Error = humanError(runErr)
	}
	return v
}

// result waits for the rollout (following continue-as-new) and reads its result, which a
// failed rollout carries in its error's details, and an aborted one in its cancellation's.
func (a *app) result(id string) (api.RolloutResult, error) {
	var res api.RolloutResult
	err := a.tc.GetWorkflow(a.ctx, id, "").Get(a.ctx, &res)
	return resultOf(err, &res)
}

// resultOf fills res from the details of a rollout's error and says what the error was.
func resultOf(err error, res *api.RolloutResult) (api.RolloutResult, error) {
	var appErr *temporal.ApplicationError
	var cancelled *temporal.CanceledError
	switch {
	case err == nil:
	case errors.As(err, &appErr) && appErr.HasDetails():
		_ = appErr.Details(res)
		err = errors.New(appErr.Message())
	case errors.As(err, &cancelled) && cancelled.HasDetails():
		_ = cancelled.Details(res)
	}
	return *res, err
}

// progressLine is one line of at most width columns (0: no limit): the bar and the counts
// first, the rate, ETA and phase only where they fit, so a narrow terminal never wraps it.
func progressLine(st api.RolloutStatus, elapsed time.Duration, width int) string {
	c := st.Counts
	done := c.Finished()
	total := max(st.Selected, done)
	rate := float64(done) / max(elapsed.Seconds(), 1)
	eta := "?"
	if rate > 0 && st.ListingDone {
		eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
	}
	counts := fmt.Sprintf(" %d/%d done, %d failed, %d in flight", done, total, c.Failures(), c.Running)
	if c.Waiting > 0 {
		counts += fmt.Sprintf(", %d waiting", c.Waiting)
	}
	tail := []string{fmt.Sprintf(", %.1f nodes/s", rate), ", ETA " + eta, " (" + st.Phase + ")"}
	const maxBar, minBar = 30, 10
	if width <= 0 {
		return bar(maxBar, done, total) + counts + strings.Join(tail, "")
	}
	// Leave the last column free: writing into it makes some terminals wrap.
	width--
	line := counts
	for _, t := range tail {
		if len(line)+len(t)+minBar+2 > width {
			break
		}
		line += t
	}
	barWidth := min(maxBar, width-len(line)-2)
	if barWidth < minBar {
		return truncate(strings.TrimPrefix(line, " "), width)
	}
	return bar(barWidth, done, total) + line
}

func bar(width, done, total int) string {
	filled := 0
	if total > 0 {
		filled = width * done / total
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}

// maxMessageShown is how much of a node's message or failure a table shows.
const maxMessageShown = 100

// clipMessage cuts a message a table shows to maxMessageShown bytes, marking the cut.
func clipMessage(msg string) string {
	if len(msg) > maxMessageShown {
		return msg[:maxMessageShown] + "…"
	}
	return msg
}

func truncate(s string, width int) string {
	if len(s) <= width {
		return s
	}
	if width <= 1 {
		return s[:max(width, 0)]
	}
	return s[:width-1] + "…"
}

// phaseText spells out the rollout's phase where its word alone misleads: a rollout's
// "draining" starts no more nodes (all started, the failure budget spent, or an abort) and
// waits for those in flight; it has nothing to do with draining a node of its Pods.
func phaseText(st api.RolloutStatus) string {
	if st.Phase != "draining" {
		return st.Phase
	}
	return fmt.Sprintf("draining (starting no more nodes; waiting for %d in flight)", st.Counts.Running+st.Counts.Waiting)
}

func printStatus(w io.Writer, st api.RolloutStatus) {
	c := st.Counts
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ROLLOUT\t%s\n", st.Name)
	fmt.Fprintf(tw, "PHASE\t%s\n", phaseText(st))
	fmt.Fprintf(tw, "TEMPLATE\t%s\n", st.TemplateHash)
	fmt.Fprintf(tw, "PARALLELISM\t%d (window %d)\n", st.Parallelism, st.Window)
	fmt.Fprintf(tw, "SELECTED\t%d%s\n", st.Selected, selectedNote(st))
	fmt.Fprintf(tw, "PENDING\t%d\nRUNNING\t%d\nWAITING\t%d\nSUCCEEDED\t%d\nFAILED\t%d\nTIMED OUT\t%d\nSKIPPED\t%d\nNODE GONE\t%d\n",
		c.Pending, c.Running, c.Waiting, c.Succeeded, c.Failed, c.TimedOut, c.Skipped, c.NodeGone)
	fmt.Fprintf(tw, "CONTINUED AS NEW\t%d\n", st.ContinuedAsNew)
	if st.Converge != nil {
		fmt.Fprintf(tw, "CONVERGING\t%s\n", convergeLine(st.Converge, st.TemplateHash))
	}
	if len(st.Waiting) > 0 {
		fmt.Fprintf(tw, "WAITING ON\t%s\n", strings.Join(st.Waiting, ", "))
	}
	if len(st.WaitingForClusterSlot) > 0 {
		fmt.Fprintf(tw, "WAITING FOR CLUSTER SLOT\t%s\n", strings.Join(st.WaitingForClusterSlot, ", "))
	}
	printPacing(tw, st.Pacing)
	printGate(tw, st.Gate)
	tw.Flush()
	printNodes(w, "FAILED NODES", st.Failures)
	printNodes(w, "RECENT", st.Recent)
}

// selectedNote says when SELECTED is not yet every node: the listing goes on, or the canaries
// run first and the other nodes are listed only once they pass.
func selectedNote(st api.RolloutStatus) string {
	switch {
	case st.Pacing != nil && st.Pacing.CanaryStage != "" && st.Pacing.CanaryStage != "done":
		return " (the canaries; the other nodes are listed once they pass)"
	case !st.ListingDone:
		return " so far (still listing)"
	}
	return ""
}

func printResult(w io.Writer, res api.RolloutResult) {
	c := res.Counts
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ROLLOUT\tSELECTED\tSUCCEEDED\tFAILED\tTIMED OUT\tSKIPPED\tNODE GONE\tDURATION\n")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", res.Name, res.Selected, c.Succeeded, c.Failed, c.TimedOut, c.Skipped, c.NodeGone,
		res.FinishedAt.Sub(res.StartedAt).Round(time.Second))
	tw.Flush()
	printNodes(w, "FAILED NODES", res.Failures)
}

func printNodes(w io.Writer, title string, nodes []api.NodeResult) {
	if len(nodes) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tOUTCOME\tREASON\tJOB\tMESSAGE\n")
	for _, n := range nodes {
		msg := n.Message
		if n.ExitCode != nil {
			msg = fmt.Sprintf("exit %d; %s", *n.ExitCode, msg)
		}
		switch {
		case n.OnDeselect:
			msg = "onDeselect Job (the node left the selector); " + msg
		case n.Undone:
			msg = "undone (Job " + n.UndoJob + "); " + msg
		case n.UndoFailed != "":
			msg = "undo failed (" + n.UndoFailed + "), kept cordoned; " + msg
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, n.Outcome, n.Reason, n.Job, clipMessage(msg))
	}
	tw.Flush()
}

// terminal tells whether w is a terminal, and its width in columns (0 if unknown).
func terminal(w io.Writer) (bool, int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return true, 80
	}
	return true, width
}

func (v rolloutView) names() []string { return []string{v.Name} }
