package main

import (
	"fmt"

	"github.com/noderollout/noderollout/internal/config"
	"github.com/noderollout/noderollout/internal/policy"
)

// loadPolicy reads the policy file, if any, and checks it against the Job watch: in namespaced
// mode every namespace the policy allows must be watched, or its Jobs would never be seen.
func loadPolicy(cfg config.Config) (*policy.Policy, error) {
	if cfg.PolicyFile == "" {
		if len(cfg.JobNamespaces) > 0 {
			return nil, fmt.Errorf("job-namespaces is set but policy-file is not: without a policy a rollout may target any namespace; allow exactly %v in a policy file", cfg.JobNamespaces)
		}
		return nil, nil
	}
	p, err := policy.Load(cfg.PolicyFile)
	if err != nil {
		return nil, config.BadValue("policy-file", err.Error())
	}
	if err := p.WithinNamespaces(cfg.JobNamespaces); err != nil {
		return nil, fmt.Errorf("policy-file %s and job-namespaces disagree: %w", cfg.PolicyFile, err)
	}
	return p, nil
}
