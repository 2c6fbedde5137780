package main

import "testing"

// The retrying line of a job's status ends with the task in trouble when
// there is one and with nothing dangling when there is none (a cancelled
// job has none), and says whether the tasks are leased again.
func TestRetryingWords(t *testing.T) {
	const failed = " that failed on a device for a reason of the device (timeout, dead worker)"
	for _, tc := range []struct {
		n         int64
		trouble   string
		cancelled bool
		want      string
	}{
		{1, "task 2 timed out on 2 devices; it ends unverified at 5 such failures", false,
			"1 task" + failed + ", leased again: to other devices first, to the same ones (after a wait that doubles) when no other connected device may take them; task 2 timed out on 2 devices; it ends unverified at 5 such failures"},
		{2, "", false, "2 tasks" + failed + ", leased again: to other devices first, to the same ones (after a wait that doubles) when no other connected device may take them"},
		{1, "", true, "1 task" + failed + ", not leased again: the job is cancelled"},
	} {
		if got := retryingWords(tc.n, tc.trouble, tc.cancelled); got != tc.want {
			t.Errorf("retryingWords(%d, %q, %v) =\n%q, want\n%q", tc.n, tc.trouble, tc.cancelled, got, tc.want)
		}
	}
}
