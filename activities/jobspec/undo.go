package jobspec

// What a Node records beside a rollout's marker, so the rollout can be undone: the template
// the node held before the marker's, and when the marker was written. Own prefixes keep them
// from the marker's readers, as the run key's does. A marker written before these existed has
// neither: its previous template is unknown, and it sorts as the oldest completion.
const (
	previousKeyPrefix = "previous.noderollout.io/"
	finishedKeyPrefix = "finished.noderollout.io/"
)

// NodePreviousKey is the Node annotation holding the template hash the node had, for this
// rollout, before the one its marker names.
func NodePreviousKey(rollout string) string { return previousKeyPrefix + rollout }

// NodeFinishedKey is the Node annotation holding when the rollout's marker was written
// (RFC 3339 with nanoseconds, UTC).
func NodeFinishedKey(rollout string) string { return finishedKeyPrefix + rollout }

// PreviousTemplate is the previous template to record when a marker for templateHash
// replaces the marker current (with the previous recorded beside it, recorded): a new
// template pushes the current one back; the same template again (a re-run, a retried
// finalize) keeps what was recorded.
func PreviousTemplate(current, recorded, templateHash string) string {
	hash, _, ok := ParseNodeMarker(current)
	if !ok || SameTemplateHash(hash, templateHash) {
		return recorded
	}
	return hash
}
