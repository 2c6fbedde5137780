package main

import "testing"

// TestCountsInWords: counts printed by the CLI take the singular for one.
func TestCountsInWords(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{plural(1, "task"), "1 task"},
		{plural(0, "task"), "0 tasks"},
		{plural(12, "task"), "12 tasks"},
		{entriesText(1), "1 entry"},
		{entriesText(0), "0 entries"},
		{entriesText(7), "7 entries"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
