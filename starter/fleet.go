package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/api"
)

// fleetCommand steers FleetRollout: one rollout over many clusters, in waves.
func fleetCommand(a *app) *cobra.Command {
	fleet := &cobra.Command{
		Use:     "fleet",
		GroupID: "rollout",
		Short:   "Roll out over many clusters in waves (workflow FleetRollout, ID fleet-<name>)",
	}
	start := &cobra.Command{
		Use:   "start -f FILE [--wait] [--reason TEXT]",
		Short: "Start a fleet rollout on the fleet task queue " + api.FleetTaskQueue,
		Long: `Start a fleet rollout: workflow FleetRollout, ID fleet-<name>, on the fleet task
queue. The file is checked first, without a server, as 'starter fleet validate'
does. With --wait, follow it to the end; exit 1 if it fails.`,
		Example: "  starter fleet start -f deploy/examples/fleet.yaml --wait",
		Args:    cobra.NoArgs,
		RunE:    run(a.startFleet),
	}
	fileFlag(start)
	startFlags(start, "follow the fleet until it ends", "the fleet's")
	validate := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check a fleet rollout request offline; exit 2 if it is bad",
		Long: `Check a fleet rollout request without any server: its own fields and the
rollout every cluster runs, as FleetRollout checks them. One line per problem;
exit code 2 if there is any.`,
		Args: cobra.NoArgs,
		RunE: run(a.validateFleet),
	}
	fileFlag(validate)
	outputFlag(validate)
	dryRun := &cobra.Command{
		Use:   "dry-run -f FILE [--timeout DURATION]",
		Short: "Show, cluster by cluster, the nodes and Jobs the fleet would create; create nothing",
		Long: `Run a dry run of the fleet's rollout on every cluster it names, each on that
cluster's task queue (so its worker must be up), at once: the nodes each would
select and the Job each node would get. Nothing is written to any cluster and
no fleet or rollout workflow is started. Exit 1 if a cluster's dry run fails.`,
		Args: cobra.NoArgs,
		RunE: run(a.dryRunFleet),
	}
	fileFlag(dryRun)
	outputFlag(dryRun)
	dryRun.Flags().Duration("timeout", defaultDryRunTimeout, "give up on a cluster whose dry run has not finished by then (no worker, say)")
	status := &cobra.Command{
		Use:   "status ID",
		Short: "Show each cluster's state in a fleet rollout",
		Args:  exactArgs(1, "ID"),
		RunE:  run(a.fleetStatus),
	}
	outputFlag(status)
	steer := []*cobra.Command{status}
	for _, s := range []string{api.SignalPause, api.SignalResume} {
		steer = append(steer, &cobra.Command{
			Use:   s + " ID",
			Short: s + " the fleet: the next wave and every running cluster's rollout",
			Args:  exactArgs(1, "ID"),
			RunE:  run(func() error { return a.sendSignal(a.fleet, s) }),
		})
	}
	steer = append(steer, &cobra.Command{
		Use:   "abort ID",
		Short: "Cancel the fleet rollout: every cluster's rollout is cancelled, running Jobs deleted",
		Args:  exactArgs(1, "ID"),
		RunE: run(func() error {
			tc, id, err := a.fleet()
			if err != nil {
				return err
			}
			if err := tc.CancelWorkflow(a.ctx, id, ""); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "aborting %s: every cluster's running Jobs are being deleted\n", id)
			return nil
		}),
	})
	for _, cmd := range steer {
		idCommand(api.FleetIDPrefix, cmd)
	}
	fleet.AddCommand(start, validate, dryRun)
	fleet.AddCommand(steer...)
	return fleet
}

// fleet is the Temporal client and the workflow ID of the fleet rollout the command names.
func (a *app) fleet() (client.Client, string, error) {
	return a.target(api.FleetIDPrefix, api.FleetID)
}

// loadFleetRequest reads a fleet request (YAML or JSON; "-" is stdin) and checks it offline.
func loadFleetRequest(path string, stdin io.Reader) (api.FleetRequest, error) {
	name, data, err := readInput(path, stdin)
	if err != nil {
		return api.FleetRequest{}, err
	}
	return parseFleetRequest(name, data)
}

// parseFleetRequest checks a fleet request as the FleetRollout workflow does, with its nested
// rollout checked as 'starter validate' checks a rollout.
func parseFleetRequest(name string, data []byte) (api.FleetRequest, error) {
	var req api.FleetRequest
	bad := func(problems ...string) (api.FleetRequest, error) {
		return req, &invalidRequest{path: name, what: "fleet rollout request", problems: problems}
	}
	asJSON, lang, fields, err := objectFields(name, data, "the fleet request's fields (name, waves, rollout, ...)")
	if err != nil {
		return bad(err.Error())
	}
	if _, isFleet := fields["waves"]; !isFleet && fields["rollout"] == nil && (fields["nodeSelector"] != nil || fields["nodes"] != nil || fields["jobTemplate"] != nil) {
		return bad(fmt.Sprintf("this is a rollout request, not a fleet's (it has no waves and no rollout): check it with 'starter validate -f %s'", name))
	}
	if err := json.Unmarshal(asJSON, &req); err != nil {
		return bad(err.Error())
	}
	// Unknown fields at any depth, with a suggestion: encoding/json would drop a misspelt
	// maxFailedClusters and leave the budget at 0.
	if problems := readableProblems(req.Problems(), req.UnknownFields(), fields, lang); len(problems) > 0 {
		return bad(problems...)
	}
	return req, nil
}

// fleetFile is the fleet request of -f, checked offline.
func (a *app) fleetFile() (api.FleetRequest, error) {
	path, err := a.filePath("the fleet request (see deploy/examples/fleet.yaml)")
	if err != nil {
		return api.FleetRequest{}, err
	}
	return a.fleetRequest(path)
}

func (a *app) startFleet() error {
	req, err := a.fleetFile()
	if err != nil {
		return err
	}
	tc, err := a.client()
	if err != nil {
		return err
	}
	run, err := tc.ExecuteWorkflow(a.ctx, client.StartWorkflowOptions{
		ID:                       api.FleetID(req.Name),
		TaskQueue:                api.FleetTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		StaticSummary:            fmt.Sprintf("fleet rollout %s over %d waves, requested by %s", req.Name, len(req.Waves), requester()),
		// The fleet hands its requester to every cluster's rollout.
		Memo: a.requesterMemo(),
	}, api.FleetRolloutWorkflow, req)
	if err != nil {
		return err
	}
	return a.started("fleet rollout", req.Name, run, a.followFleet)
}

// followFleet prints each change of the fleet's clusters until it ends, then its result; an
// error when it did not succeed, so the exit code says so. With -o json|yaml it prints only
// the ended fleet.
func (a *app) followFleet(id string) error {
	quiet := a.forMachines()
	done := make(chan struct{})
	var res api.FleetResult
	var runErr error
	go func() {
		runErr = a.tc.GetWorkflow(a.ctx, id, "").Get(a.ctx, &res)
		var appErr *temporal.ApplicationError
		if errors.As(runErr, &appErr) && appErr.HasDetails() {
			_ = appErr.Details(&res)
		}
		close(done)
	}()
	ticker := time.NewTicker(followInterval)
	defer ticker.Stop()
	last := ""
	var asked time.Time // a query is a Temporal action: at most one per followQueryInterval
	for {
		select {
		case <-done:
			if err := a.print(res, func(w io.Writer) error { return printFleet(w, res) }); err != nil {
				return err
			}
			if runErr != nil {
				return runError{fmt.Errorf("fleet rollout %s failed: %s", id, humanError(runErr))}
			}
			return nil
		case <-a.ctx.Done():
			return a.ctx.Err()
		case <-ticker.C:
			if quiet || (!asked.IsZero() && time.Since(asked) < followQueryInterval) {
				continue
			}
			st, err := queryStatus[api.FleetStatus](a, id)
			if err != nil {
				continue
			}
			asked = time.Now()
			if line := fleetLine(st); line != last {
				fmt.Fprintln(a.out, line)
				last = line
			}
		}
	}
}

// fleetLine is one line of a fleet's progress: its phase and wave, and each cluster's state.
func fleetLine(st api.FleetStatus) string {
	parts := make([]string, 0, len(st.Clusters))
	for _, c := range st.Clusters {
		part := c.Cluster + " " + c.State
		if c.Counts != nil && c.State == api.ClusterRunning {
			part += fmt.Sprintf(" (%d/%d done)", c.Counts.Finished(), c.Counts.Finished()+c.Counts.Pending+c.Counts.Running+c.Counts.Waiting)
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("fleet %s: %s, wave %d of %d: %s", st.Name, st.Phase, st.Wave, st.Waves, strings.Join(parts, ", "))
}

// fleetValidation is what fleet validate prints with -o json|yaml.
type fleetValidation struct {
	File     string            `json:"file"`
	Valid    bool              `json:"valid"`
	Problems []string          `json:"problems,omitempty"`
	Request  *api.FleetRequest `json:"request,omitempty"`
}

func (a *app) validateFleet() error {
	path, err := a.filePath("the fleet request to check")
	if err != nil {
		return err
	}
	req, err := loadFleetRequest(path, a.in)
	if path == "-" {
		path = "stdin"
	}
	err = a.refuseInvalid(path, err, func(problems []string) any {
		return fleetValidation{File: path, Valid: false, Problems: problems}
	})
	if err != nil {
		return err
	}
	clusters := 0
	for _, w := range req.Waves {
		clusters += len(w)
	}
	return a.print(fleetValidation{File: path, Valid: true, Request: &req}, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s: valid (fleet %s: %d clusters in %d waves, rollout %s)\n", path, req.Name, clusters, len(req.Waves), fleetRolloutName(req))
		return err
	})
}

func fleetRolloutName(req api.FleetRequest) string {
	if req.Rollout.Name != "" {
		return req.Rollout.Name
	}
	return req.Name
}

// clusterDryRun is one cluster's part of fleet dry-run.
type clusterDryRun struct {
	Cluster string             `json:"cluster"`
	Wave    int                `json:"wave"`
	Plan    *api.RolloutResult `json:"plan,omitempty"`
	Error   string             `json:"error,omitempty"`
}

func (a *app) dryRunFleet() error {
	req, err := a.fleetFile()
	if err != nil {
		return err
	}
	tc, timeout, err := a.dryRunClient()
	if err != nil {
		return err
	}
	rollout := req.Rollout
	rollout.Name = fleetRolloutName(req)
	base := req.TaskQueue
	if base == "" {
		base = api.TaskQueue
	}
	var plans []clusterDryRun
	for w, wave := range req.Waves {
		for _, c := range wave {
			plans = append(plans, clusterDryRun{Cluster: c, Wave: w + 1})
		}
	}
	var wg sync.WaitGroup
	for i := range plans {
		wg.Add(1)
		go func(p *clusterDryRun) {
			defer wg.Done()
			cl := api.Cluster{Name: p.Cluster}
			res, err := a.runDryRun(tc, cl.RolloutID(rollout.Name), api.ClusterTaskQueue(base, p.Cluster), rollout, timeout)
			if err != nil {
				p.Error = humanError(err)
				return
			}
			p.Plan = &res
		}(&plans[i])
	}
	wg.Wait()
	failed := 0
	for _, p := range plans {
		if p.Error != "" {
			failed++
		}
	}
	err = a.print(plans, func(w io.Writer) error {
		for i, p := range plans {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "== cluster %s (wave %d)\n", p.Cluster, p.Wave)
			if p.Error != "" {
				fmt.Fprintf(w, "dry run failed: %s\n", p.Error)
				continue
			}
			if err := printDryRun(w, rollout, *p.Plan); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if failed > 0 {
		return runError{fmt.Errorf("the dry run failed on %d of %d clusters", failed, len(plans))}
	}
	return nil
}

// printFleet draws the fleet's clusters.
func printFleet(w io.Writer, st api.FleetStatus) error {
	phase := st.Phase
	if phase == "draining" {
		phase = "draining (starting no more clusters)"
	}
	fmt.Fprintf(w, "fleet %s: %s, wave %d of %d, %d clusters failed (budget %d)\n",
		st.Name, phase, st.Wave, st.Waves, st.FailedClusters, st.MaxFailedClusters)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tCLUSTER\tSTATE\tSUCCEEDED\tFAILED\tROLLOUT\tMESSAGE")
	for _, c := range st.Clusters {
		ok, failed := "-", "-"
		if c.Counts != nil {
			ok, failed = fmt.Sprint(c.Counts.Succeeded), fmt.Sprint(c.Counts.Failures())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Wave, c.Cluster, c.State, ok, failed, c.WorkflowID, clipMessage(c.Message))
	}
	return tw.Flush()
}

func (a *app) fleetStatus() error {
	tc, id, err := a.fleet()
	if err != nil {
		return err
	}
	a.tc = tc
	st, err := queryStatus[api.FleetStatus](a, id)
	if err != nil {
		return err
	}
	return a.print(st, func(w io.Writer) error { return printFleet(w, st) })
}
