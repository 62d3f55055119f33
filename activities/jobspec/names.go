// Package jobspec decides what one node's Job looks like and what its status means: its name and
// labels, the template rendered for the node, and the phase read back from the Job. It is pure —
// no I/O, clock, randomness or goroutines — because workflow code calls it and must replay
// identically.
package jobspec

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// Label and annotation keys (all on Jobs, except NodeMarkerKey which is on Nodes).
const (
	LabelRollout           = "noderollout.io/rollout"   // rollout name, on every Job: the informer's filter
	LabelNode              = "noderollout.io/node"      // NodeLabelValue(node)
	AnnotationNode         = "noderollout.io/node-name" // full node name
	AnnotationTemplateHash = "noderollout.io/template-hash"
	AnnotationRunID        = "noderollout.io/run-id" // NodeRollout child run ID that created the Job
	NodePlaceholder        = "{{node}}"              // replaced by the node name everywhere in the template text
	MaxTemplateBytes       = 256 * 1024
)

const (
	markerKeyPrefix = "noderollout.io/"
	// maxLabel is the Kubernetes limit for label values and DNS-1123 labels alike.
	maxLabel = 63
	// nodeHashLen gives 40 bits: two node names that truncate alike are practically never
	// told apart by less, and the label must stay unique per node for Pod lookups.
	nodeHashLen = 10
	// jobHashLen is short because the Job name is read by people; the node part already
	// separates nodes, and the hash only has to break ties between look-alike names and runs.
	jobHashLen      = 5
	templateHashLen = 10
)

// NodeMarkerKey is the Node annotation that records a rollout's outcome: "noderollout.io/<rollout>".
func NodeMarkerKey(rollout string) string {
	return markerKeyPrefix + rollout
}

// NodeMarker is its value "<templateHash>:<outcome>"; ParseNodeMarker splits it (ok=false when malformed).
func NodeMarker(templateHash, outcome string) string {
	return templateHash + ":" + outcome
}

// ParseNodeMarker splits a NodeMarker value. Nodes are edited by people and other tools, so an
// annotation that does not have both halves is reported as malformed rather than half-trusted.
func ParseNodeMarker(v string) (templateHash, outcome string, ok bool) {
	templateHash, outcome, found := strings.Cut(v, ":")
	if !found || templateHash == "" || outcome == "" || strings.Contains(outcome, ":") {
		return "", "", false
	}
	return templateHash, outcome, true
}

// NodeLabelValue turns a node name (DNS subdomain, up to 253 chars, any case) into a valid label
// value (<=63, [a-z0-9A-Z-_.], alnum at both ends). Unchanged when already valid and short;
// otherwise sanitized, truncated, and suffixed with "_" + a short hash of the ORIGINAL name so
// that distinct nodes (e.g. "a.b" vs "a-b") never collide. Node names cannot contain "_", so an
// altered name never equals another node's unaltered one.
func NodeLabelValue(node string) string {
	if isLabelValue(node) {
		return node
	}
	clean := make([]byte, len(node))
	for i := range len(node) {
		c := node[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			c = '-'
		}
		clean[i] = c
	}
	prefix := strings.TrimLeftFunc(string(clean), isLabelPunct)
	prefix = prefix[:min(len(prefix), maxLabel-nodeHashLen-1)]
	prefix = strings.TrimRightFunc(prefix, isLabelPunct)
	hash := hexHash(nodeHashLen, []byte(node))
	if prefix == "" {
		return "n_" + hash
	}
	return prefix + "_" + hash
}

// JobName is the deterministic Job name "<rollout>-<node part>-<5 hex of hash(rollout,node,runID)>",
// a valid DNS-1123 label of at most 63 characters (parts truncated as needed).
//
// The run ID is in the hash so that a new run of the same rollout never adopts (or trips over)
// a Job an earlier run left behind.
func JobName(rollout, node, runID string) string {
	hash := hexHash(jobHashLen, tuple(rollout, node, runID))
	r, n := labelChars(rollout), labelChars(node)
	room := maxLabel - len(hash) - 1
	switch {
	case r != "" && n != "":
		room-- // the dash between rollout and node
		// Each part may use half the room, and whatever the other leaves unused: the node
		// part is what people look for, but a long node must not squeeze out the rollout.
		r = truncateLabel(r, max(room/2, room-len(n)))
		n = truncateLabel(n, room-len(r))
		return r + "-" + n + "-" + hash
	case r != "":
		return truncateLabel(r, room) + "-" + hash
	case n != "":
		return truncateLabel(n, room) + "-" + hash
	}
	return hash
}

// TemplateHash is a short (10 hex chars) content hash of the template text (before rendering).
func TemplateHash(template string) string {
	return hexHash(templateHashLen, []byte(template))
}

func hexHash(n int, b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:n]
}

// tuple encodes strings with length prefixes, so that ("ab", "c") and ("a", "bc") hash apart.
func tuple(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// labelChars lowercases s and replaces every byte a DNS-1123 label cannot hold with '-'.
func labelChars(s string) string {
	b := make([]byte, len(s))
	for i := range len(s) {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		default:
			c = '-'
		}
		b[i] = c
	}
	return strings.Trim(string(b), "-")
}

// truncateLabel cuts a labelChars result to at most n bytes without leaving a trailing dash.
func truncateLabel(s string, n int) string {
	return strings.TrimRight(s[:min(len(s), n)], "-")
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isLabelPunct(r rune) bool {
	return r == '-' || r == '_' || r == '.'
}

// isLabelValue mirrors Kubernetes' label-value rule; tests hold it against the real validator.
func isLabelValue(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > maxLabel || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if !isAlnum(s[i]) && !isLabelPunct(rune(s[i])) {
			return false
		}
	}
	return true
}

// isDNSLabel mirrors Kubernetes' DNS-1123 label rule (namespaces, rollout names).
func isDNSLabel(s string) bool {
	return len(s) <= maxLabel && isDNSPart(s)
}

// isDNSSubdomain mirrors Kubernetes' DNS-1123 subdomain rule, which node names follow. Its
// dot-separated parts have no length limit of their own; only the whole name is capped.
func isDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if !isDNSPart(part) {
			return false
		}
	}
	return true
}

func isDNSPart(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
