package jobspec

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is what a Job's status says about it.
type Phase string

const (
	PhaseRunning   Phase = "running"
	PhaseSucceeded Phase = "succeeded"
	PhaseFailed    Phase = "failed"
	PhaseSuspended Phase = "suspended"
)

// Interpret reads JobStatus conditions (only those with Status True count):
// Complete or SuccessCriteriaMet -> succeeded; Failed or FailureTarget -> failed (failure wins when
// both kinds are present); Suspended -> suspended; else running. reason/message come from the
// deciding condition.
//
// SuccessCriteriaMet and FailureTarget count because the Job controller sets them as soon as the
// outcome is decided, while Complete and Failed wait for the Job's Pods to terminate; the
// terminal condition is still preferred as the source of reason and message when both are set.
func Interpret(status batchv1.JobStatus) (phase Phase, reason, message string) {
	// In order of precedence.
	deciders := []struct {
		typ   batchv1.JobConditionType
		phase Phase
	}{
		{batchv1.JobFailed, PhaseFailed},
		{batchv1.JobFailureTarget, PhaseFailed},
		{batchv1.JobComplete, PhaseSucceeded},
		{batchv1.JobSuccessCriteriaMet, PhaseSucceeded},
		{batchv1.JobSuspended, PhaseSuspended},
	}
	for _, d := range deciders {
		for _, c := range status.Conditions {
			if c.Type == d.typ && c.Status == corev1.ConditionTrue {
				return d.phase, c.Reason, c.Message
			}
		}
	}
	return PhaseRunning, "", ""
}

// Terminal reports whether the Job carries Complete or Failed, the conditions the Job
// controller adds once the Job's Pods have stopped (since Kubernetes 1.31; before, at once),
// and when that condition was set. SuccessCriteriaMet and FailureTarget decide the outcome but
// come while Pods may still be terminating, so they are not terminal.
func Terminal(status batchv1.JobStatus) (terminal bool, since metav1.Time) {
	for _, c := range status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true, c.LastTransitionTime
		}
	}
	return false, metav1.Time{}
}

// Interim returns the SuccessCriteriaMet or FailureTarget condition of a Job that has no
// terminal condition yet, or nil.
func Interim(status batchv1.JobStatus) *batchv1.JobCondition {
	if terminal, _ := Terminal(status); terminal {
		return nil
	}
	for i, c := range status.Conditions {
		if (c.Type == batchv1.JobFailureTarget || c.Type == batchv1.JobSuccessCriteriaMet) && c.Status == corev1.ConditionTrue {
			return &status.Conditions[i]
		}
	}
	return nil
}
