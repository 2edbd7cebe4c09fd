package bench

import "sort"

// LatencySamplesMs returns every event's commit → applied (by the last
// consumer that took it) in milliseconds, sorted: the sample behind
// Stats().Latency, for CDF plots.
func (r *ApplyRecorder) LatencySamplesMs() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]float64, 0, len(r.events))
	for _, a := range r.events {
		at := r.appliedAt(a)
		if len(at) == 0 || a.committed.IsZero() {
			continue
		}
		var last = a.committed
		for _, t := range at {
			if t.After(last) {
				last = t
			}
		}
		out = append(out, float64(last.Sub(a.committed))/1e6)
	}
	sort.Float64s(out)
	return out
}
