package main

import (
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/noderollout/noderollout/workflows"
)

// loadRequest reads a rollout request from a YAML or JSON file. In YAML, jobTemplate may be
// written as the Job object itself instead of a YAML string; it is turned into the string the
// workflow takes.
func loadRequest(path string) (workflows.RolloutRequest, error) {
	var req workflows.RolloutRequest
	data, err := os.ReadFile(path)
	if err != nil {
		return req, err
	}
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return req, fmt.Errorf("%s: not YAML or JSON: %w", path, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(asJSON, &fields); err != nil {
		return req, fmt.Errorf("%s: the request must be an object: %w", path, err)
	}
	if tpl, ok := fields["jobTemplate"]; ok && len(tpl) > 0 && tpl[0] == '{' {
		text, err := yaml.JSONToYAML(tpl)
		if err != nil {
			return req, fmt.Errorf("%s: jobTemplate: %w", path, err)
		}
		fields["jobTemplate"], _ = json.Marshal(string(text))
		if asJSON, err = json.Marshal(fields); err != nil {
			return req, err
		}
	}
	if err := json.Unmarshal(asJSON, &req); err != nil {
		return req, fmt.Errorf("%s: %w", path, err)
	}
	// The workflow validates again; checking here too saves a round trip and names the file.
	if _, err := workflows.Validate(req); err != nil {
		return req, fmt.Errorf("%s: %w", path, err)
	}
	return req, nil
}
