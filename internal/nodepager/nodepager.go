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

// Pager holds the Nodes in the order it serves them (give them sorted by name, as the API
// server keeps them); its continue tokens are offsets.
type Pager struct {
	mu         sync.Mutex
	nodes      []corev1.Node
	lists      int
	firstPages int
}

// New serves one Node per name, each with labels.
func New(names []string, labels map[string]string) *Pager {
	p := &Pager{nodes: make([]corev1.Node, len(names))}
	for i, name := range names {
		p.nodes[i].Name = name
		p.nodes[i].Labels = labels
	}
	return p
}

// Clientset is a fake clientset whose Node LISTs the pager answers.
func (p *Pager) Clientset() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("list", "nodes", p.React)
	return cs
}

// React answers one Node LIST with the page its Limit and Continue ask for.
func (p *Pager) React(action k8stesting.Action) (bool, runtime.Object, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	opts := action.(k8stesting.ListActionImpl).GetListOptions()
	p.lists++
	start := 0
	if opts.Continue == "" {
		p.firstPages++
	} else {
		start, _ = strconv.Atoi(opts.Continue)
	}
	end := len(p.nodes)
	if opts.Limit > 0 {
		end = min(end, start+int(opts.Limit))
	}
	list := &corev1.NodeList{Items: p.nodes[start:end]}
	if end < len(p.nodes) {
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
