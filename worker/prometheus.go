package main

import (
	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/internal/config"
)

// prometheus is the Prometheus the rollouts' metric gates ask, nil when the configuration
// names none (a request with gates.prometheus then fails, naming --prometheus-url).
func prometheus(cfg config.Config) (*activities.Prometheus, error) {
	if cfg.PrometheusURL == "" {
		return nil, nil
	}
	p, err := activities.NewPrometheus(activities.Prometheus{URL: cfg.PrometheusURL, BearerTokenFile: cfg.PrometheusBearerTokenFile,
		CAFile: cfg.PrometheusCAFile, InsecureSkipVerify: cfg.PrometheusInsecureSkipVerify})
	if err != nil {
		return nil, config.BadValue("prometheus-url", err.Error())
	}
	return p, nil
}
