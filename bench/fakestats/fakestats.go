// Package fakestats is what bench/fakeworker's fake cluster counts, as its GET /fake writes it
// and the bench reads it into its results: one type for both ends, so that they cannot drift.
package fakestats

// Stats are the fake cluster's counts.
type Stats struct {
	NodeLists      int `json:"nodeLists"`
	FirstPageLists int `json:"firstPageLists"`
	Jobs           int `json:"jobs"`    // RunJob calls
	Adopted        int `json:"adopted"` // of them, calls again for a node run whose Job existed
	MostAtOnce     int `json:"mostAtOnce"`
}
