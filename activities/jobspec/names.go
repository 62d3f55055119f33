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
	// FinalizerOutcome holds a finished Job until FinalizeJob has read and recorded its
	// outcome, so that a TTL or a deletion while no worker watched cannot lose it.
	FinalizerOutcome = "noderollout.io/outcome"
	NodePlaceholder  = "{{node}}" // replaced by the node name everywhere in the template text

)

const (
	markerKeyPrefix = "noderollout.io/"
	runKeyPrefix    = "run.noderollout.io/"
	// maxLabel is the Kubernetes limit for label values and DNS-1123 labels alike.
	maxLabel = 63
	// nodeHashLen gives 40 bits: two node names that truncate alike are practically never
	// told apart by less, and the label must stay unique per node for Pod lookups.
	nodeHashLen = 10
	// jobHashLen base-36 characters are 51 bits: 100,000 nodes of one rollout share a name
	// with odds of about 1 in 500,000 even if their readable parts were all alike.
	jobHashLen = 10
	// legacyJobHashLen hex characters (20 bits) is what LegacyJobName has always used.
	legacyJobHashLen = 5
	// LegacyTemplateHashLen hex characters (40 bits) is the template hash of rollouts started
	// before the hash was the whole SHA-256; their histories carry it, so it is still read.
	LegacyTemplateHashLen = 10
)

// NodeMarkerKey is the Node annotation that records a rollout's outcome: "noderollout.io/<rollout>".
func NodeMarkerKey(rollout string) string {
	return markerKeyPrefix + rollout
}

// NodeRunKey is the Node annotation naming the NodeRollout run that wrote the rollout's marker,
// so that a run repeated from its start can tell it has finished the node. Its own prefix keeps
// it from the marker's readers, which take every noderollout.io/ annotation for a marker.
func NodeRunKey(rollout string) string {
	return runKeyPrefix + rollout
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

// JobName is the deterministic Job name "<rollout part>-<node part>-<hash>", a valid DNS-1123
// label of at most 63 characters. The hash is 10 base-36 characters (51 bits) of
// (rollout, node, runID): the run ID is in it so that a new run of the same rollout never adopts
// (or trips over) a Job an earlier run left behind, and 51 bits keep the names of 100,000 nodes
// apart even where their readable parts agree. The node part is the node's host name (its first
// DNS label: "ip-10-0-12-34" of an EKS name) cut to its END, where cloud node names differ
// ("...-5f2c9e1b-00ab" of a GKE name, "...-vmss00000a" of an AKS one), so a person can still
// tell the Jobs of a pool apart. JobNamePrefix is everything before the hash.
func JobName(rollout, node, runID string) string {
	return JobNamePrefix(rollout, node) + base36Hash(jobHashLen, tuple(rollout, node, runID))
}

// JobNamePrefix is what every run's Job name for this node starts with (JobName without its
// hash): what a dry run can show before any run exists. It ends with '-' unless empty.
func JobNamePrefix(rollout, node string) string {
	r, n := labelChars(rollout), labelChars(hostLabel(node))
	room := maxLabel - jobHashLen - 1
	switch {
	case r != "" && n != "":
		room-- // the dash between rollout and node
		// Each part may use half the room, and whatever the other leaves unused: the node
		// part is what people look for, but a long node must not squeeze out the rollout.
		r = truncateLabel(r, max(room/2, room-len(n)))
		n = keepTail(n, room-len(r))
		return r + "-" + n + "-"
	case r != "":
		return truncateLabel(r, room) + "-"
	case n != "":
		return keepTail(n, room) + "-"
	}
	return ""
}

// LegacyJobName is the Job name of releases before JobName kept the node name's tail: the
// rollout and the START of the node name, and 5 hex characters (20 bits) of hash. Running
// NodeRollout histories computed their Job's name with it, so it must never change.
func LegacyJobName(rollout, node, runID string) string {
	hash := hexHash(legacyJobHashLen, tuple(rollout, node, runID))
	r, n := labelChars(rollout), labelChars(node)
	room := maxLabel - len(hash) - 1
	switch {
	case r != "" && n != "":
		room--
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

// hostLabel is a node name's first DNS label, unless that is empty: "ip-10-0-12-34" of
// "ip-10-0-12-34.eu-west-1.compute.internal". The domain after it is shared by a whole region
// or site, so it would only take room from the part that tells nodes apart; the hash still
// covers the whole name.
func hostLabel(node string) string {
	if host, _, _ := strings.Cut(node, "."); host != "" {
		return host
	}
	return node
}

// keepTail cuts a labelChars result to at most n bytes by dropping its start, and starts the
// result at a dash-separated word when one begins near the cut, so that no half word leads.
func keepTail(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	tail := s[len(s)-n:]
	if s[len(s)-n-1] != '-' {
		// The cut fell inside a word; start at the next word unless that loses much.
		if i := strings.IndexByte(tail, '-'); i >= 0 && i < n/3 {
			tail = tail[i:]
		}
	}
	return strings.Trim(tail, "-")
}

// base36Hash is n base-36 digits of a hash of b: more bits per character than hex, in the
// characters a DNS label allows. n must be at most 12 (36^12 < 2^64).
func base36Hash(n int, b []byte) string {
	sum := sha256.Sum256(b)
	v := binary.BigEndian.Uint64(sum[:8])
	digits := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		digits[i] = "0123456789abcdefghijklmnopqrstuvwxyz"[v%36]
		v /= 36
	}
	return string(digits)
}

// TemplateHash is the content hash of the template text (before rendering): its whole SHA-256
// in hex. It names the template wherever a rollout refers to it (the stored copy, the Jobs,
// the Node markers), so two templates must never share it: 40 bits, as it once was, took
// seconds to collide.
func TemplateHash(template string) string {
	return hexHash(sha256.Size*2, []byte(template))
}

// TemplateHashMatches says whether hash is the template's hash: its whole SHA-256, or, for a
// rollout started before that (LegacyTemplateHashLen characters in its history), those
// characters of it. Anything else, a prefix of another length included, does not match.
func TemplateHashMatches(template, hash string) bool {
	full := TemplateHash(template)
	return hash == full || len(hash) == LegacyTemplateHashLen && hash == full[:LegacyTemplateHashLen]
}

// SameTemplateHash says whether two template hashes name the same template: equal, or one a
// legacy hash that the other begins with (a Node marker written before the whole hash, read
// by a rollout after it, or the other way round).
func SameTemplateHash(a, b string) bool {
	if a == b {
		return a != ""
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	return len(a) == LegacyTemplateHashLen && len(b) == sha256.Size*2 && strings.HasPrefix(b, a)
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
