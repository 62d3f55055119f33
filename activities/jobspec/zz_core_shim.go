package jobspec

// LegacyJobName is a stand-in until the jobspec naming change lands (delete on merge).
func LegacyJobName(rollout, node, runID string) string { return JobName(rollout, node, runID) }
