package version

import (
	"errors"
	"testing"
)

func TestParseAndCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.4.0", "1.4", 0},
		{"1.4.1", "1.4.0", 1},
		{"1.10.0", "1.9.9", 1},
		{"v2.0.0", "1.99.99", 1},
		{"dev", "0.0.1", -1},
		{"0.1.0", "0.2.0", -1},
	} {
		a, err := Parse(tc.a)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.a, err)
		}
		b, err := Parse(tc.b)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.b, err)
		}
		if got := a.Compare(b); got != tc.want {
			t.Errorf("%s vs %s = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for _, bad := range []string{"", "1", "1.2.3.4", "1.x.0", "1.-2.0", "1..0", "1.2.3-rc1", "1234567890.0.0"} {
		if _, err := Parse(bad); !errors.Is(err, ErrBadVersion) {
			t.Errorf("Parse(%q) = %v, want ErrBadVersion", bad, err)
		}
	}
	if got := (V{1, 4, 0}).Short(); got != "1.4" {
		t.Errorf("Short = %q", got)
	}
	if got := (V{}).String(); got != Dev {
		t.Errorf("zero V = %q", got)
	}
}
