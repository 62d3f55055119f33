package activities

import batchv1 "k8s.io/api/batch/v1"

// Who started a rollout, as the starter claims it, recorded where people look: on the Job and
// on the Node next to the outcome marker.
const (
	// AnnotationRequester on a Job: the requester of the rollout that made it.
	AnnotationRequester = "noderollout.io/requester"
	requesterKeyPrefix  = "requester.noderollout.io/"
)

// NodeRequesterKey is the Node annotation naming who requested the rollout whose outcome the
// marker noderollout.io/<rollout> records. It has its own prefix so the marker's readers, which
// take every noderollout.io/ annotation for a marker, never see it.
func NodeRequesterKey(rollout string) string { return requesterKeyPrefix + rollout }

// stampRequester records the requester on a Job about to be created: the start request's, or
// none. The template's own annotation of that name is dropped, so a template never names who
// asked for it.
func stampRequester(job *batchv1.Job, requester string) {
	delete(job.Annotations, AnnotationRequester)
	if requester == "" {
		return
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[AnnotationRequester] = requester
}
