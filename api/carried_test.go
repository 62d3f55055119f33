package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestListingResumesFromTheCursorsPage(t *testing.T) {
	l := &ListingPosition{
		Marks: []ListingMark{{Continue: "t1000", First: "node-1000"}, {Continue: "t1500", First: "node-1500"}},
		Next:  "t2000", End: "node-1999",
	}
	require.Equal(t, "t2000", l.ResumeToken("node-1999"), "the slice handled: right after it")
	require.Equal(t, "t1500", l.ResumeToken("node-1700"), "within the second page: from that page")
	require.Equal(t, "t1500", l.ResumeToken("node-1500"))
	require.Equal(t, "t1000", l.ResumeToken("node-1499"), "within the first page: from the slice's start")
	require.Equal(t, "t1000", l.ResumeToken("node-0999"), "before the slice's first name: from its start")
	require.Empty(t, (*ListingPosition)(nil).ResumeToken("node-0001"), "no position: the first page")
	require.Equal(t, "t1500", (&ListingPosition{Marks: l.Marks, End: "node-1999"}).ResumeToken("node-1999"),
		"no token after the slice: from its cursor's page")
}
