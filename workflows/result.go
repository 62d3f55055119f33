package workflows

import (
	"strings"

	"github.com/noderollout/noderollout/api"
)

// Carried failures keep what identifies the failure; the log tail stays in the node's own
// result and Event, so the state handed across continue-as-new stays small.
const (
	maxCarriedMessage     = 512
	maxCarriedTermination = 256
)

// carriedFailure is a failed node's result trimmed for continue-as-new.
func carriedFailure(r api.NodeResult) api.NodeResult {
	r.LogTail = ""
	r.Message = truncateUTF8(r.Message, maxCarriedMessage)
	r.TerminationMessage = truncateUTF8(r.TerminationMessage, maxCarriedTermination)
	return r
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
