package jobspec

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

var conditionTypes = []batchv1.JobConditionType{
	batchv1.JobComplete,
	batchv1.JobSuccessCriteriaMet,
	batchv1.JobFailed,
	batchv1.JobFailureTarget,
	batchv1.JobSuspended,
}

func condition(typ batchv1.JobConditionType, status corev1.ConditionStatus) batchv1.JobCondition {
	return batchv1.JobCondition{
		Type:    typ,
		Status:  status,
		Reason:  fmt.Sprintf("%s%s", typ, status),
		Message: fmt.Sprintf("message of %s=%s", typ, status),
	}
}

// TestInterpretAllCombinations gives each condition type one of absent, True, False and
// Unknown, and checks every combination against the rule written out independently.
func TestInterpretAllCombinations(t *testing.T) {
	states := []corev1.ConditionStatus{"", corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}
	combos := 1
	for range conditionTypes {
		combos *= len(states)
	}
	for n := range combos {
		var status batchv1.JobStatus
		isTrue := map[batchv1.JobConditionType]bool{}
		k := n
		for _, typ := range conditionTypes {
			s := states[k%len(states)]
			k /= len(states)
			if s == "" {
				continue
			}
			status.Conditions = append(status.Conditions, condition(typ, s))
			isTrue[typ] = s == corev1.ConditionTrue
		}

		var want Phase
		var decider batchv1.JobConditionType
		switch {
		case isTrue[batchv1.JobFailed]:
			want, decider = PhaseFailed, batchv1.JobFailed
		case isTrue[batchv1.JobFailureTarget]:
			want, decider = PhaseFailed, batchv1.JobFailureTarget
		case isTrue[batchv1.JobComplete]:
			want, decider = PhaseSucceeded, batchv1.JobComplete
		case isTrue[batchv1.JobSuccessCriteriaMet]:
			want, decider = PhaseSucceeded, batchv1.JobSuccessCriteriaMet
		case isTrue[batchv1.JobSuspended]:
			want, decider = PhaseSuspended, batchv1.JobSuspended
		default:
			want = PhaseRunning
		}

		phase, reason, message := Interpret(status)
		assert.Equal(t, want, phase, "conditions %+v", status.Conditions)
		if decider == "" {
			assert.Empty(t, reason)
			assert.Empty(t, message)
			continue
		}
		wantCond := condition(decider, corev1.ConditionTrue)
		assert.Equal(t, wantCond.Reason, reason, "conditions %+v", status.Conditions)
		assert.Equal(t, wantCond.Message, message, "conditions %+v", status.Conditions)
	}
}

func TestInterpret(t *testing.T) {
	tests := []struct {
		name       string
		conditions []batchv1.JobCondition
		want       Phase
		wantReason string
	}{
		{name: "no conditions", want: PhaseRunning},
		{
			name:       "FailureTarget alone fails before Failed is set",
			conditions: []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}},
			want:       PhaseFailed, wantReason: "BackoffLimitExceeded",
		},
		{
			name:       "SuccessCriteriaMet alone succeeds before Complete is set",
			conditions: []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached"}},
			want:       PhaseSucceeded, wantReason: "CompletionsReached",
		},
		{
			name: "Failed wins over Complete",
			conditions: []batchv1.JobCondition{
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached"},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded"},
			},
			want: PhaseFailed, wantReason: "DeadlineExceeded",
		},
		{
			name: "Failed gives the reason over FailureTarget",
			conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "target"},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "failed"},
			},
			want: PhaseFailed, wantReason: "failed",
		},
		{
			name:       "resumed Job runs",
			conditions: []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse, Reason: "JobResumed"}},
			want:       PhaseRunning,
		},
		{
			name:       "suspended",
			conditions: []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue, Reason: "JobSuspended"}},
			want:       PhaseSuspended, wantReason: "JobSuspended",
		},
		{
			name:       "unknown condition types are ignored",
			conditions: []batchv1.JobCondition{{Type: "SomethingNew", Status: corev1.ConditionTrue, Reason: "x"}},
			want:       PhaseRunning,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			phase, reason, _ := Interpret(batchv1.JobStatus{Conditions: tt.conditions})
			assert.Equal(t, tt.want, phase)
			assert.Equal(t, tt.wantReason, reason)
		})
	}
}
