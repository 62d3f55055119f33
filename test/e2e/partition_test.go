//go:build e2e

package e2e

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
)

// partition is a TCP proxy between one worker and the Temporal server that can cut the link
// as a network partition does: nothing is refused or reset, every byte both ways and every new
// connection simply waits until the link heals (then flows, as TCP's retransmits would).
type partition struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	open   chan struct{} // closed while the link is up
}

// newPartition starts a proxy to target, the link up; the test's end stops it.
func newPartition(t *testing.T, target string) *partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &partition{target: target, ln: ln, open: make(chan struct{})}
	close(p.open)
	t.Cleanup(func() { p.heal(); _ = ln.Close() })
	go p.serve()
	return p
}

// Addr is the address the partitioned worker dials instead of the server's.
func (p *partition) Addr() string { return p.ln.Addr().String() }

// cut stops every byte on the link until heal.
func (p *partition) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// heal lets the link carry bytes again.
func (p *partition) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// passable returns once the link is up.
func (p *partition) passable() {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	<-open
}

func (p *partition) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

// pipe connects one client connection to the server once the link is up.
func (p *partition) pipe(c net.Conn) {
	p.passable()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	go p.copy(u, c)
	p.copy(c, u)
}

// copy carries src's bytes to dst, each read held while the link is cut; either end closing
// closes both.
func (p *partition) copy(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.passable()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestSoakWorkerPartitionedFromTemporalWhileItsNodesWatch cuts the one worker that holds a
// rollout off from the Temporal server while each node's first workflow task watches its 10 s
// Job, and a second worker starts (as another replica would). The cut-off worker still reaches
// the API server, so it goes on with what it holds: it watches the Jobs to their end and
// finalizes them (marker on the Node, Job let go), but can report none of it. The server times
// its tasks out and the second worker takes them over, reading the outcomes the first recorded
// instead of creating the Jobs again. The rollout finishes while the link is still cut: no
// node is lost, none gets a second Job, and every node succeeds once.
func TestSoakWorkerPartitionedFromTemporalWhileItsNodesWatch(t *testing.T) {
	const nodes = 8
	link := newPartition(t, stack.TemporalAddress)
	queue, _ := ownWorkers(t, 1, "--temporal-address", link.Addr())
	f := NewFleet(t, nodes)
	req := f.Request("partitioned", 10*time.Second)
	req.Parallelism = nodes
	req.JobTimeout = "10m"
	req.KeepJobs = "" // succeeded Jobs are deleted once finalized: a create again would make a second
	created := watchJobs(t, f.Namespace)
	run := StartOn(t, req, queue)
	waitFor(t, 90*time.Second, "every node's Job created", func() bool { return created.total() >= nodes })
	link.cut()
	cut := time.Now()
	other, err := StartWorker(queue+"-other", "--task-queue", queue)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Stop() })
	waitFor(t, 3*time.Minute, "the rollout finished while its first worker was cut off", func() bool {
		d, err := stack.Temporal.DescribeWorkflow(context.Background(), run.GetID(), "")
		return err == nil && d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
	t.Logf("the rollout finished %s after the cut", time.Since(cut).Round(time.Second))
	res := Succeeded(t, run)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, nodes, res.Counts.Succeeded)
	readBack := oneJobEachAndReadBack(t, f, created)
	t.Logf("%d of %d nodes read back the outcome the cut-off worker had recorded on the Node", readBack, nodes)
	require.Positive(t, readBack, "the cut hit the window: the cut-off worker finalized some node's Job")
}
