package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestMaxFailuresTakesNumbersAndStrings(t *testing.T) {
	for raw, want := range map[string]FailureBudget{`3`: {count: 3}, `"3"`: {count: 3}, `"10%"`: {percent: 10, isShare: true}, `"0"`: {}} {
		var req RolloutRequest
		require.NoError(t, json.Unmarshal([]byte(`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","maxFailures":`+raw+`}`), &req))
		s, problems := Check(req, false)
		require.Empty(t, problems, raw)
		require.Equal(t, want, s.FailureBudget, raw)
	}
}

func TestBudgetShareOfSelected(t *testing.T) {
	b := FailureBudget{percent: 10, isShare: true}
	require.True(t, b.Allows(10, 100))
	require.False(t, b.Allows(11, 100))
	require.True(t, FailureBudget{count: 2}.Allows(2, 5))
	require.False(t, FailureBudget{count: 2}.Allows(3, 5))
}

// FuzzValidate feeds arbitrary requests (as JSON, the way they arrive) to validation: it must
// never panic, and whatever it accepts must really be valid.
func FuzzValidate(f *testing.F) {
	seed, _ := json.Marshal(RolloutRequest{Name: "kata-deploy", Namespace: "kube-system", NodeSelector: "kata=true", JobTemplate: "apiVersion: batch/v1\nkind: Job"})
	f.Add(string(seed))
	f.Add(`{"name":"x","nodes":["a","a"],"jobTemplate":"t","maxFailures":"100%","batch":{"initial":1,"growth":"linear"}}`)
	f.Add(`{"name":"","nodes":[],"parallelism":-5,"jobTimeout":"1ns"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, input string) {
		var req RolloutRequest
		if err := json.Unmarshal([]byte(input), &req); err != nil {
			return // not JSON at all: the Temporal data converter rejects it before the workflow
		}
		s, problems := Check(req, false)
		if len(problems) > 0 {
			return
		}
		if len(validation.IsDNS1123Label(req.Name)) > 0 {
			t.Fatalf("accepted name %q", req.Name)
		}
		if (len(req.Nodes) > 0) == (req.NodeSelector != "" || req.FieldSelector != "") {
			t.Fatalf("accepted nodes=%v selector=%q field=%q", req.Nodes, req.NodeSelector, req.FieldSelector)
		}
		for _, n := range req.Nodes {
			if len(validation.IsDNS1123Subdomain(n)) > 0 {
				t.Fatalf("accepted node %q", n)
			}
		}
		if (req.JobTemplate == "") == (req.JobTemplateRef == nil) {
			t.Fatal("accepted zero or two templates")
		}
		if s.Parallelism < 1 || s.Parallelism > MaxParallelism || s.Batch.Initial < 1 || s.Batch.Initial > s.Parallelism {
			t.Fatalf("accepted parallelism %d window %d", s.Parallelism, s.Batch.Initial)
		}
		if s.JobTimeout < time.Second || s.JobTimeout > MaxJobTimeout || s.JobTTL < 0 || s.DelayBetweenNodes < 0 {
			t.Fatalf("accepted durations %v %v %v", s.JobTimeout, s.JobTTL, s.DelayBetweenNodes)
		}
		if s.FailureBudget.count < 0 || s.FailureBudget.percent < 0 || s.FailureBudget.percent > 100 {
			t.Fatalf("accepted budget %+v", s.FailureBudget)
		}
		switch s.KeepJobs {
		case KeepNever, KeepFailed, KeepAlways:
		default:
			t.Fatalf("accepted keepJobs %q", s.KeepJobs)
		}
		if len(req.decodeProblems) > 0 {
			t.Fatalf("accepted despite %v", req.decodeProblems)
		}
	})
}
