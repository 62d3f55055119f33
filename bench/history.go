package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/noderollout/noderollout/internal/bulk"
)

// localActivityMarker is the marker name the Go SDK records for each local activity.
const localActivityMarker = "LocalActivity"

// historyStats sums the histories of a rollout: every run of the Rollout workflow (following
// continue-as-new) and every NodeRollout child any run started.
type historyStats struct {
	Runs             int            `json:"runs"`
	ParentEvents     int            `json:"parentEvents"`
	ChildEvents      int            `json:"childEvents"`
	Children         int            `json:"children"`
	MaxRunEvents     int            `json:"maxRunEvents"`
	MaxRunBytes      int            `json:"maxRunBytes"`
	TotalBytes       int            `json:"totalBytes"`
	ActivityTasks    int            `json:"activityTasks"`    // activities scheduled
	ActivityAttempts int            `json:"activityAttempts"` // sum of their attempts (ActivityTaskStarted.attempt)
	LocalActivities  int            `json:"localActivities"`  // LocalActivity markers
	LocalAttempts    int            `json:"localAttempts"`    // sum of the markers' attempts
	ParentByType     map[string]int `json:"parentByType"`
	ChildByType      map[string]int `json:"childByType"`
	// The bytes of each event type (proto size, as TotalBytes): where a node's history goes.
	ParentBytesByType map[string]int `json:"parentBytesByType"`
	ChildBytesByType  map[string]int `json:"childBytesByType"`
	ReadSeconds       float64        `json:"readSeconds"`
	// Around each continue-as-new: the drain (last child launched -> run closed, while the
	// window empties) and the gap (run closed -> next run's first child launched).
	CANDrainSeconds float64 `json:"canDrainSeconds"`
	CANGapSeconds   float64 `json:"canGapSeconds"`

	Parent parentPhases `json:"parentPhases"`
	Child  childPhases  `json:"childPhases"`
}

// parentPhases is where the Rollout workflow spends a slot handover.
type parentPhases struct {
	WFTScheduleToStart stat `json:"wftScheduleToStart"`
	WFTStartToComplete stat `json:"wftStartToComplete"`
	ChildClosedToNext  stat `json:"childClosedToNextInitiated"` // child closed event -> next child initiated
	InitiatedToStarted stat `json:"initiatedToStarted"`
}

// childPhases is where one NodeRollout's time goes, from its history's timestamps.
type childPhases struct {
	StartToFirstWFT     stat `json:"startToFirstWFT"`     // child started -> first workflow task picked up
	FirstWFT            stat `json:"firstWFT"`            // first task (CreateJob local activity) -> completed
	WaitScheduleToStart stat `json:"waitScheduleToStart"` // WaitJob scheduled -> started
	WaitRun             stat `json:"waitRun"`             // WaitJob started -> completed
	WaitDoneToWFT       stat `json:"waitDoneToWFT"`       // WaitJob completed -> next workflow task started
	FinalizeToClose     stat `json:"finalizeToClose"`     // that task started (FinalizeJob local activity) -> child closed
	WFTScheduleToStart  stat `json:"wftScheduleToStart"`
	WFTStartToComplete  stat `json:"wftStartToComplete"`
	StartToClose        stat `json:"startToClose"`
}

type execution struct{ id, runID string }

// readHistories walks the rollout's runs from firstRunID and reads every child's history,
// workers at a time.
func readHistories(ctx context.Context, tc client.Client, workflowID, firstRunID string, workers int) (historyStats, error) {
	started := time.Now()
	hs := historyStats{
		ParentByType: map[string]int{}, ChildByType: map[string]int{},
		ParentBytesByType: map[string]int{}, ChildBytesByType: map[string]int{},
	}
	var children []execution
	var pWFTq, pWFTx, pHandoff, pStart []float64
	var lastClosed time.Time // of the previous run, when it continued as new
	for run := firstRunID; run != ""; {
		events, err := history(ctx, tc, workflowID, run)
		if err != nil {
			return hs, fmt.Errorf("history of %s run %s: %w", workflowID, run, err)
		}
		hs.Runs++
		hs.ParentEvents += len(events)
		hs.MaxRunEvents = max(hs.MaxRunEvents, len(events))
		size := historyBytes(events)
		hs.TotalBytes += size
		hs.MaxRunBytes = max(hs.MaxRunBytes, size)
		countTypes(hs.ParentByType, hs.ParentBytesByType, events)
		hs.countActivities(events)
		q, x := wftLatencies(events)
		pWFTq, pWFTx = append(pWFTq, q...), append(pWFTx, x...)
		var closed []time.Time
		var firstInitiated, lastInitiated time.Time
		initiated := map[int64]time.Time{}
		run = ""
		for _, e := range events {
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
				initiated[e.GetEventId()] = e.GetEventTime().AsTime()
				if firstInitiated.IsZero() {
					firstInitiated = e.GetEventTime().AsTime()
				}
				lastInitiated = e.GetEventTime().AsTime()
				if len(closed) > 0 {
					pHandoff = append(pHandoff, e.GetEventTime().AsTime().Sub(closed[0]).Seconds())
					closed = closed[1:]
				}
			case enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
				a := e.GetChildWorkflowExecutionStartedEventAttributes()
				children = append(children, execution{a.GetWorkflowExecution().GetWorkflowId(), a.GetWorkflowExecution().GetRunId()})
				if t, ok := initiated[a.GetInitiatedEventId()]; ok {
					pStart = append(pStart, e.GetEventTime().AsTime().Sub(t).Seconds())
				}
			case enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
				enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED, enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
				enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED:
				closed = append(closed, e.GetEventTime().AsTime())
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				run = e.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
			}
		}
		if !lastClosed.IsZero() && !firstInitiated.IsZero() {
			hs.CANGapSeconds += firstInitiated.Sub(lastClosed).Seconds()
		}
		lastClosed = time.Time{}
		if run != "" && len(events) > 0 {
			lastClosed = events[len(events)-1].GetEventTime().AsTime()
			if !lastInitiated.IsZero() {
				hs.CANDrainSeconds += lastClosed.Sub(lastInitiated).Seconds()
			}
		}
	}
	hs.Parent = parentPhases{
		WFTScheduleToStart: summarize(pWFTq), WFTStartToComplete: summarize(pWFTx),
		ChildClosedToNext: summarize(pHandoff), InitiatedToStarted: summarize(pStart),
	}
	hs.Children = len(children)

	var mu sync.Mutex
	var cp childSamples
	err := bulk.Parallel(ctx, workers, children, func(ctx context.Context, c execution) error {
		events, err := history(ctx, tc, c.id, c.runID)
		if err != nil {
			return fmt.Errorf("history of %s: %w", c.id, err)
		}
		mu.Lock()
		defer mu.Unlock()
		hs.ChildEvents += len(events)
		size := historyBytes(events)
		hs.TotalBytes += size
		countTypes(hs.ChildByType, hs.ChildBytesByType, events)
		hs.countActivities(events)
		cp.add(events)
		return nil
	})
	hs.Child = cp.summary()
	hs.ReadSeconds = time.Since(started).Seconds()
	return hs, err
}

// history reads one run's events with the SDK's iterator.
func history(ctx context.Context, tc client.Client, id, runID string) ([]*historypb.HistoryEvent, error) {
	it := tc.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, nil
}

func historyBytes(events []*historypb.HistoryEvent) int {
	n := 0
	for _, e := range events {
		n += proto.Size(e)
	}
	return n
}

func countTypes(count, bytes map[string]int, events []*historypb.HistoryEvent) {
	for _, e := range events {
		count[e.GetEventType().String()]++
		bytes[e.GetEventType().String()] += proto.Size(e)
	}
}

func (hs *historyStats) countActivities(events []*historypb.HistoryEvent) {
	for _, e := range events {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			hs.ActivityTasks++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			hs.ActivityAttempts += int(max(1, e.GetActivityTaskStartedEventAttributes().GetAttempt()))
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			a := e.GetMarkerRecordedEventAttributes()
			if a.GetMarkerName() != localActivityMarker {
				continue
			}
			hs.LocalActivities++
			attempt := 1
			if data := a.GetDetails()["data"].GetPayloads(); len(data) > 0 {
				var marker struct{ Attempt int }
				if json.Unmarshal(data[0].GetData(), &marker) == nil && marker.Attempt > 0 {
					attempt = marker.Attempt
				}
			}
			hs.LocalAttempts += attempt
		}
	}
}

// wftLatencies returns each workflow task's schedule-to-start and start-to-complete seconds.
func wftLatencies(events []*historypb.HistoryEvent) (queued, ran []float64) {
	scheduled := map[int64]time.Time{}
	started := map[int64]time.Time{}
	for _, e := range events {
		t := e.GetEventTime().AsTime()
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			scheduled[e.GetEventId()] = t
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started[e.GetEventId()] = t
			if s, ok := scheduled[e.GetWorkflowTaskStartedEventAttributes().GetScheduledEventId()]; ok {
				queued = append(queued, t.Sub(s).Seconds())
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			if s, ok := started[e.GetWorkflowTaskCompletedEventAttributes().GetStartedEventId()]; ok {
				ran = append(ran, t.Sub(s).Seconds())
			}
		}
	}
	return queued, ran
}

// childSamples collects the per-child phase durations.
type childSamples struct {
	startToFirstWFT, firstWFT, waitQueued, waitRun, waitDoneToWFT, finalizeToClose, wftQueued, wftRan, startToClose []float64
}

func (c *childSamples) add(events []*historypb.HistoryEvent) {
	var start, firstWFTStarted, firstWFTDone, waitScheduled, waitStarted, waitDone, finWFT, closed time.Time
	for _, e := range events {
		t := e.GetEventTime().AsTime()
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			start = t
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			if firstWFTStarted.IsZero() {
				firstWFTStarted = t
			} else if !waitDone.IsZero() && finWFT.IsZero() {
				finWFT = t
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			if firstWFTDone.IsZero() {
				firstWFTDone = t
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if waitScheduled.IsZero() {
				waitScheduled = t
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if waitStarted.IsZero() {
				waitStarted = t
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED, enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
			if waitDone.IsZero() {
				waitDone = t
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
			closed = t
		}
	}
	add := func(dst *[]float64, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			*dst = append(*dst, to.Sub(from).Seconds())
		}
	}
	add(&c.startToFirstWFT, start, firstWFTStarted)
	add(&c.firstWFT, firstWFTStarted, firstWFTDone)
	add(&c.waitQueued, waitScheduled, waitStarted)
	add(&c.waitRun, waitStarted, waitDone)
	add(&c.waitDoneToWFT, waitDone, finWFT)
	add(&c.finalizeToClose, finWFT, closed)
	add(&c.startToClose, start, closed)
	q, x := wftLatencies(events)
	c.wftQueued = append(c.wftQueued, q...)
	c.wftRan = append(c.wftRan, x...)
}

func (c *childSamples) summary() childPhases {
	return childPhases{
		StartToFirstWFT: summarize(c.startToFirstWFT), FirstWFT: summarize(c.firstWFT),
		WaitScheduleToStart: summarize(c.waitQueued), WaitRun: summarize(c.waitRun),
		WaitDoneToWFT: summarize(c.waitDoneToWFT), FinalizeToClose: summarize(c.finalizeToClose),
		WFTScheduleToStart: summarize(c.wftQueued), WFTStartToComplete: summarize(c.wftRan),
		StartToClose: summarize(c.startToClose),
	}
}
