// Package didyoumean finds the known name a mistyped one was probably meant to be.
package didyoumean

import "strings"

// Closest is the candidate nearest to word (case-insensitive edit distance), if it is near
// enough to be a typo: at most a third of the word's length, and at least 1.
func Closest(word string, candidates []string) (string, bool) {
	best, bestDist := "", -1
	w := strings.ToLower(word)
	for _, c := range candidates {
		d := distance(w, strings.ToLower(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist < 0 || bestDist > max(1, len([]rune(word))/3) {
		return "", false
	}
	return best, true
}

// Hint is `; did you mean "x"?` or nothing.
func Hint(word string, candidates []string) string {
	if c, ok := Closest(word, candidates); ok {
		return hint(c)
	}
	return ""
}

func hint(suggestion string) string {
	return `; did you mean "` + suggestion + `"?`
}

// distance is the Levenshtein distance counting an adjacent swap as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
