package workflows

import "github.com/noderollout/noderollout/api"

// window is the number of nodes allowed in flight: it starts at the batch's initial size,
// grows each time a whole window of nodes has succeeded in a row, and never exceeds the
// parallelism ceiling (which an update may change at any time).
type window struct {
	size    int
	ceiling int
	growth  string
	step    int
	streak  int // successes since the window last grew or a node failed
}

func newWindow(b api.Batch, ceiling int) window {
	w := window{size: b.Initial, ceiling: ceiling, growth: b.Growth, step: b.Step}
	w.clamp()
	return w
}

// resume restores a window carried across continue-as-new.
func resumeWindow(b api.Batch, ceiling, size int) window {
	w := newWindow(b, ceiling)
	if size > 0 {
		w.size = size
		w.clamp()
	}
	return w
}

func (w *window) clamp() {
	if w.size > w.ceiling {
		w.size = w.ceiling
	}
	if w.size < 1 {
		w.size = 1
	}
}

// setCeiling applies a new parallelism. A fixed window follows it; a growing one is only capped.
func (w *window) setCeiling(c int) {
	if w.growth == api.GrowthFixed || w.size == w.ceiling {
		w.size = c
	}
	w.ceiling = c
	w.clamp()
}

// succeeded counts a success and grows the window once a whole window has succeeded.
func (w *window) succeeded() {
	w.streak++
	if w.streak < w.size {
		return
	}
	w.streak = 0
	switch w.growth {
	case api.GrowthLinear:
		w.size += w.step
	case api.GrowthExponential:
		w.size *= w.step
	}
	w.clamp()
}

// failed holds the window where it is: growth resumes only after a fresh run of successes.
func (w *window) failed() { w.streak = 0 }
