package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/workflows"
)

// followInterval is how often --wait asks the rollout for its status.
const followInterval = 2 * time.Second

// follow prints progress until the rollout ends, then its result; it returns an error when
// the rollout did not succeed, so the exit code says so.
func follow(ctx context.Context, e *env, id string) error {
	tty := isTerminal(e.out)
	done := make(chan struct{})
	var res workflows.RolloutResult
	var runErr error
	go func() {
		res, runErr = result(ctx, e, id)
		close(done)
	}()
	started := time.Now()
	ticker := time.NewTicker(followInterval)
	defer ticker.Stop()
	lastLine := ""
	lastPrinted := time.Time{}
	for {
		select {
		case <-done:
			if tty {
				fmt.Fprintln(e.out)
			}
			printResult(e.out, res)
			if runErr != nil {
				return fmt.Errorf("rollout %s failed: %w", id, runErr)
			}
			fmt.Fprintf(e.out, "rollout %s: %d/%d nodes succeeded, %d failed\n", res.Name, res.Counts.Succeeded, res.Selected, res.Counts.Failures())
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			st, err := queryStatus(ctx, e, id)
			if err != nil {
				continue // between runs of a continue-as-new, or the worker is restarting
			}
			line := progressLine(st, time.Since(started))
			switch {
			case tty:
				fmt.Fprintf(e.out, "\r\033[K%s", line)
			case line != lastLine && time.Since(lastPrinted) >= 10*time.Second || lastPrinted.IsZero():
				fmt.Fprintln(e.out, line)
				lastPrinted = time.Now()
			}
			lastLine = line
		}
	}
}

// result waits for the rollout (following continue-as-new) and reads its result, which a
// failed rollout carries in its error's details.
func result(ctx context.Context, e *env, id string) (workflows.RolloutResult, error) {
	var res workflows.RolloutResult
	err := e.client.GetWorkflow(ctx, id, "").Get(ctx, &res)
	if err == nil {
		return res, nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		_ = appErr.Details(&res)
		return res, errors.New(appErr.Message())
	}
	return res, err
}

func progressLine(st workflows.RolloutStatus, elapsed time.Duration) string {
	c := st.Counts
	done := c.Finished()
	total := max(st.Selected, done)
	width := 30
	filled := 0
	if total > 0 {
		filled = width * done / total
	}
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	rate := float64(done) / max(elapsed.Seconds(), 1)
	eta := "?"
	if rate > 0 && st.ListingDone {
		eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
	}
	return fmt.Sprintf("[%s] %d/%d done, %d failed, %d in flight, %d waiting, %.1f nodes/s, ETA %s (%s)",
		bar, done, total, c.Failures(), c.Running, c.Waiting, rate, eta, st.Phase)
}

func printStatus(w io.Writer, st workflows.RolloutStatus) {
	c := st.Counts
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ROLLOUT\t%s\n", st.Name)
	fmt.Fprintf(tw, "PHASE\t%s\n", st.Phase)
	fmt.Fprintf(tw, "TEMPLATE\t%s\n", st.TemplateHash)
	fmt.Fprintf(tw, "PARALLELISM\t%d (window %d)\n", st.Parallelism, st.Window)
	fmt.Fprintf(tw, "SELECTED\t%d%s\n", st.Selected, map[bool]string{false: " so far (still listing)", true: ""}[st.ListingDone])
	fmt.Fprintf(tw, "PENDING\t%d\nRUNNING\t%d\nWAITING\t%d\nSUCCEEDED\t%d\nFAILED\t%d\nTIMED OUT\t%d\nSKIPPED\t%d\nNODE GONE\t%d\n",
		c.Pending, c.Running, c.Waiting, c.Succeeded, c.Failed, c.TimedOut, c.Skipped, c.NodeGone)
	fmt.Fprintf(tw, "CONTINUED AS NEW\t%d\n", st.ContinuedAsNew)
	if len(st.Waiting) > 0 {
		fmt.Fprintf(tw, "WAITING ON\t%s\n", strings.Join(st.Waiting, ", "))
	}
	tw.Flush()
	printNodes(w, "FAILED NODES", st.Failures)
	printNodes(w, "RECENT", st.Recent)
}

func printResult(w io.Writer, res workflows.RolloutResult) {
	c := res.Counts
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ROLLOUT\tSELECTED\tSUCCEEDED\tFAILED\tTIMED OUT\tSKIPPED\tNODE GONE\tDURATION\n")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", res.Name, res.Selected, c.Succeeded, c.Failed, c.TimedOut, c.Skipped, c.NodeGone,
		res.FinishedAt.Sub(res.StartedAt).Round(time.Second))
	tw.Flush()
	printNodes(w, "FAILED NODES", res.Failures)
}

func printNodes(w io.Writer, title string, nodes []workflows.NodeResult) {
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
		if len(msg) > 100 {
			msg = msg[:100] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, n.Outcome, n.Reason, n.Job, msg)
	}
	tw.Flush()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
