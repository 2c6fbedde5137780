package main

import "testing"

func TestShellWord(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/home/ada/.idlepool", "/home/ada/.idlepool"},
		{"http://127.0.0.1:7420", "http://127.0.0.1:7420"},
		{"/home/ada/my pool", "'/home/ada/my pool'"},
		{"/tmp/it's", `'/tmp/it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"", "''"},
	} {
		if got := shellWord(tc.in); got != tc.want {
			t.Errorf("shellWord(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
