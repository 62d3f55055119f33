// Package nodepager serves a fixed set of Nodes through a fake clientset in pages, as the API
// server does (the fake clientset alone ignores Limit and Continue), and counts the LISTs: the
// listing tests and the bench's fake cluster read a huge fleet through it.
package nodepager

import (
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Pager holds the Nodes' names in the order it serves them (give them sorted, as the API
// server keeps them); its continue tokens are offsets. Each page's Nodes are made as it is
// read, so a fleet of 100,000 costs its names, not 100,000 Node objects: a process that
// serves it measures as one that reads the fleet from an API server.
type Pager struct {
	names  []string
	labels map[string]string

	mu         sync.Mutex
	lists      int
	firstPages int
}

// New serves one Node per name, each with labels.
func New(names []string, labels map[string]string) *Pager {
	return &Pager{names: names, labels: labels}
}

// Clientset is a fake clientset whose Node LISTs the pager answers.
func (p *Pager) Clientset() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("list", "nodes", p.React)
	return cs
}

// React answers one Node LIST with the page its Limit and Continue ask for.
func (p *Pager) React(action k8stesting.Action) (bool, runtime.Object, error) {
	opts := action.(k8stesting.ListActionImpl).GetListOptions()
	start := 0
	p.mu.Lock()
	p.lists++
	if opts.Continue == "" {
		p.firstPages++
	} else {
		start, _ = strconv.Atoi(opts.Continue)
	}
	p.mu.Unlock()
	end := len(p.names)
	if opts.Limit > 0 {
		end = min(end, start+int(opts.Limit))
	}
	list := &corev1.NodeList{Items: make([]corev1.Node, end-start)}
	for i, name := range p.names[start:end] {
		list.Items[i].Name = name
		list.Items[i].Labels = p.labels
	}
	if end < len(p.names) {
		list.Continue = strconv.Itoa(end)
	}
	return true, list, nil
}

// Lists is how many LISTs the pager answered; FirstPages how many of them started at the
// first page (no continue token).
func (p *Pager) Lists() (lists, firstPages int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lists, p.firstPages
}
