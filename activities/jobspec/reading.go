package jobspec

import "sync"

// sampleReadings keeps, per template, the JSON its YAML reads as for the sample node. Every
// node's Build compares its own reading against it; rendering it afresh for each node doubled
// Build's cost, and a worker builds one template for thousands of nodes.
var sampleReadings = readingCache{max: 16}

// readingCache maps a template to its sample reading (nil: the template does not render).
// A rollout brings one template, so a few entries cover a worker's rollouts; when full it
// starts over rather than tracking use, which costs one render per template at worst.
type readingCache struct {
	mu         sync.Mutex
	max        int
	byTemplate map[string][]byte
}

func (c *readingCache) get(template, sample string) []byte {
	c.mu.Lock()
	ref, found := c.byTemplate[template]
	c.mu.Unlock()
	if found {
		return ref
	}
	ref = readingFor(template, sample)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byTemplate == nil || len(c.byTemplate) >= c.max {
		c.byTemplate = make(map[string][]byte, c.max)
	}
	c.byTemplate[template] = ref
	return ref
}

// readingFor renders the template for the sample node; nil when that fails.
func readingFor(template, sample string) []byte {
	_, data, err := render(template, sample)
	if err != nil {
		return nil
	}
	return data
}
