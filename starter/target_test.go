package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// fakeDescriber knows the workflow IDs in exist, and counts the lookups.
type fakeDescriber struct {
	exist map[string]bool
	err   error
	calls int
}

func (f *fakeDescriber) DescribeWorkflow(_ context.Context, id, _ string) (*client.WorkflowExecutionDescription, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	if !f.exist[id] {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	return &client.WorkflowExecutionDescription{}, nil
}

func resolveRollout(d describer, arg string) (string, error) {
	return resolveID(context.Background(), d, arg, api.RolloutIDPrefix, api.RolloutID)
}

// "rollout-x" is the ID of the rollout named x and the name of the one with ID rollout-rollout-x:
// whichever exists is meant; if both do, the starter refuses and says how to choose.
func TestResolveIDOfANameThatReadsAsAnID(t *testing.T) {
	for _, tc := range []struct {
		name  string
		exist []string
		want  string
	}{
		{name: "only the rollout named x", exist: []string{"rollout-x"}, want: "rollout-x"},
		{name: "only the rollout named rollout-x", exist: []string{"rollout-rollout-x"}, want: "rollout-rollout-x"},
		{name: "neither: the ID, for the command to say not found", want: "rollout-x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDescriber{exist: map[string]bool{}}
			for _, id := range tc.exist {
				d.exist[id] = true
			}
			id, err := resolveRollout(d, "rollout-x")
			require.NoError(t, err)
			require.Equal(t, tc.want, id)
		})
	}

	d := &fakeDescriber{exist: map[string]bool{"rollout-x": true, "rollout-rollout-x": true}}
	_, err := resolveRollout(d, "rollout-x")
	require.ErrorAs(t, err, new(usageError), "ambiguous is exit 2")
	require.EqualError(t, err, "rollout-x is both a workflow ID and a name: workflow rollout-x exists, and so does workflow rollout-rollout-x, named rollout-x\n"+
		"  say which with --id: --id rollout-x, or --id rollout-rollout-x")
}

// A name without the prefix reads one way only: no lookup.
func TestResolveIDOfAPlainName(t *testing.T) {
	d := &fakeDescriber{}
	id, err := resolveRollout(d, "x")
	require.NoError(t, err)
	require.Equal(t, "rollout-x", id)
	require.Zero(t, d.calls)

	cluster := func(name string) string { return api.Cluster{Name: "eu"}.RolloutID(name) }
	id, err = resolveID(context.Background(), d, "x", api.RolloutIDPrefix, cluster)
	require.NoError(t, err)
	require.Equal(t, "rollout-eu:x", id)
}

// A lookup that fails for another reason than not found is the command's error, not a guess.
func TestResolveIDPassesOnAServerError(t *testing.T) {
	_, err := resolveRollout(&fakeDescriber{err: serviceerror.NewPermissionDenied("no", "")}, "rollout-x")
	require.True(t, errors.As(err, new(*serviceerror.PermissionDenied)), "%v", err)
}

// Every command that takes a rollout or fleet ID has --id, the way out of an ambiguous one.
func TestEveryIDCommandHasTheIDFlag(t *testing.T) {
	var walk func(*cobra.Command)
	seen := 0
	walk = func(cmd *cobra.Command) {
		if slices.Contains(strings.Fields(cmd.Use), "ID") {
			seen++
			require.NotNil(t, cmd.Flags().Lookup("id"), cmd.CommandPath())
		}
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(newRoot(&app{}))
	require.Equal(t, 10, seen, "status, pause, resume, set-parallelism, approve, abort; fleet status, pause, resume, abort")
}

// fakeClient answers DescribeWorkflow from a fakeDescriber; any other call panics.
type fakeClient struct {
	client.Client
	d *fakeDescriber
}

func (c fakeClient) DescribeWorkflow(ctx context.Context, id, runID string) (*client.WorkflowExecutionDescription, error) {
	return c.d.DescribeWorkflow(ctx, id, runID)
}

// With --id the argument is the workflow ID as is, ambiguous or not; without, it is resolved.
func TestIDFlagTakesTheArgumentAsIs(t *testing.T) {
	d := &fakeDescriber{exist: map[string]bool{"rollout-x": true, "rollout-rollout-x": true}}
	cmd := &cobra.Command{}
	idFlag(cmd)
	require.NoError(t, cmd.Flags().Parse([]string{"--id"}))
	a := &app{ctx: context.Background(), tc: fakeClient{d: d}, cmd: cmd, args: []string{"rollout-x"}}
	_, id, err := a.rollout()
	require.NoError(t, err)
	require.Equal(t, "rollout-x", id)
	require.Zero(t, d.calls)

	require.NoError(t, cmd.Flags().Parse([]string{"--id=false"}))
	_, _, err = a.rollout()
	require.ErrorAs(t, err, new(usageError))
}
