package jobspec

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadingCacheKeepsTheSampleReadingPerTemplate(t *testing.T) {
	c := readingCache{max: 2}
	sample, _ := pickSample(goodTemplate)
	want := readingFor(goodTemplate, sample)
	require.NotNil(t, want)

	assert.Equal(t, want, c.get(goodTemplate, sample))
	// A second template's reading differs, and neither is mixed up with the other.
	other := edit(t, `value: "{{node}}"`, `value: "other-{{node}}"`)
	otherReading := c.get(other, sample)
	assert.NotEqual(t, want, otherReading)
	assert.Equal(t, want, c.get(goodTemplate, sample))

	// A template that does not render has no reading, cached or not.
	broken := goodTemplate + "\n  bogusField: 1\n"
	assert.Nil(t, c.get(broken, sample))
	assert.Nil(t, c.get(broken, sample))

	// Full caches start over: every template still gets its own reading.
	for i := range 5 {
		tpl := edit(t, `value: "{{node}}"`, fmt.Sprintf(`value: "v%d-{{node}}"`, i))
		assert.Equal(t, readingFor(tpl, sample), c.get(tpl, sample))
		assert.LessOrEqual(t, len(c.byTemplate), c.max)
	}
	assert.Equal(t, otherReading, c.get(other, sample))
}

// A node whose name YAML misreads is refused even when the template's reading came from the
// cache, filled by an earlier node.
func TestBuildRefusesAMisreadNodeWithACachedReading(t *testing.T) {
	unquoted := edit(t, `value: "{{node}}"`, "value: {{node}}") + "\n# cached reading test\n"
	p := testParams()
	_, err := Build(unquoted, p)
	require.NoError(t, err)
	p.Node = "017"
	_, err = Build(unquoted, p)
	fe := requireFieldError(t, err, "jobTemplate")
	assert.Contains(t, fe.Fix, "quotes")
}

// go test ./activities/jobspec -bench Build -benchmem
func BenchmarkBuild(b *testing.B) {
	p := testParams()
	for i := 0; b.Loop(); i++ {
		p.Node = fmt.Sprintf("ip-10-0-%d-%d.eu-west-1.compute.internal", i/250%250, i%250)
		if _, err := Build(goodTemplate, p); err != nil {
			b.Fatal(err)
		}
	}
}
