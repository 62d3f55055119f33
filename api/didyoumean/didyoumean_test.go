package didyoumean

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"parallelism", "maxFailures", "nodeSelector", "nodes", "name"}
	cases := []struct {
		word, want string
		ok         bool
	}{
		{"parallelizm", "parallelism", true},
		{"paralelism", "parallelism", true},
		{"maxfailures", "maxFailures", true},
		{"nodeSelcetor", "nodeSelector", true},
		{"nmae", "name", true},
		{"schedule", "", false},
		{"x", "", false},
	}
	for _, c := range cases {
		got, ok := Closest(c.word, names)
		if got != c.want || ok != c.ok {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", c.word, got, ok, c.want, c.ok)
		}
	}
	if h := Hint("parallelizm", names); h != `; did you mean "parallelism"?` {
		t.Errorf("Hint = %q", h)
	}
}
