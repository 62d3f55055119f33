// Package api is noderollout's wire contract: the JSON a rollout is started with (RolloutRequest,
// FleetRequest) and what it answers (RolloutStatus, RolloutResult, FleetStatus, the node's
// NodeResult and NodeStep, a budget's BudgetStatus), the names to start, signal, query and
// update the workflows by, the outcome, reason and error words, and the request's defaults and
// validation, each problem a FieldError that names the field and the fix.
//
// It is the bottom of the import graph: it imports neither the Temporal SDK nor client-go, so
// the starter, the benchmark and the end-to-end suite read and check requests without workflow
// code, and workflows and activities import it, never the reverse (layers_test.go). JSON field
// names and words here are recorded in running workflows' histories: they never change.
package api
