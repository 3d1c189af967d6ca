package choice

import "testing"

func TestUnknownError(t *testing.T) {
	for _, c := range []struct {
		name string
		want string
	}{
		{"tinny", `unknown preset "tinny" (want one of llama3.1-8b, small, tiny; did you mean "tiny"?)`},
		{"TINY", `unknown preset "TINY" (want one of llama3.1-8b, small, tiny; did you mean "tiny"?)`},
		{"gigantic", `unknown preset "gigantic" (want one of llama3.1-8b, small, tiny)`},
		{"", `unknown preset "" (want one of llama3.1-8b, small, tiny)`},
	} {
		e := &UnknownError{What: "preset", Name: c.name, Known: []string{"tiny", "small", "llama3.1-8b"}}
		// Known is sorted for the message.
		if got := e.Error(); got != c.want {
			t.Errorf("%q: %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	known := []string{"h100", "h200", "a100", "mi250x"}
	for _, c := range []struct{ in, want string }{
		{"h20", "h200"}, {"H100", "h100"}, {"a10", "a100"}, {"mi250", "mi250x"}, {"v100", "h100"}, {"tpu", ""}, {"", ""},
	} {
		if got := Nearest(c.in, known); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
