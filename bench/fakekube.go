package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/noderollout/noderollout/bench/fakestats"
)

// startFakeKube starts bench/fakeworker serving the task queue: noderollout's workflows over a
// fake fleet of n Nodes whose Jobs each run jobSeconds.
// Its Nodes carry the labels nodeLabels (key=value) that the rollout's nodeSelector selects.
func startFakeKube(ctx context.Context, bin, temporalAddress, taskQueue, logPath, nodeLabels string, n int, jobSeconds float64) (*workerProc, error) {
	return startReadyProcess(ctx, bin, logPath, func(addr string) []string {
		return []string{"--temporal-address", temporalAddress, "--task-queue", taskQueue, "--metrics-listen", addr,
			"--nodes", strconv.Itoa(n), "--node-labels", nodeLabels, "--job-seconds", strconv.FormatFloat(jobSeconds, 'f', -1, 64)}
	})
}

// fakeStats reads the fake cluster's counts; nil (logged) when they cannot be read.
func (w *workerProc) fakeStats() *fakestats.Stats {
	resp, err := http.Get("http://" + w.metricsAddr + "/fake")
	if err != nil {
		logf("fake cluster counts: %v", err)
		return nil
	}
	defer resp.Body.Close()
	var st fakestats.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		logf("fake cluster counts: %v", fmt.Errorf("GET /fake: %w", err))
		return nil
	}
	return &st
}
