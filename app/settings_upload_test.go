package app

import (
	"strings"
	"testing"

	"idlepool/idle"
)

// TestSettingsUploadCap: the Computer tab's "Upload to share" says that
// empty means the default cap of 1 MiB/s (not unlimited, as it was), and
// saves what the owner types: empty the default, "unlimited" no cap, a
// rate that cap; a saved "unlimited" shows as such when the window opens
// again.
func TestSettingsUploadCap(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Computer")
	if f.shareUpload.Text != "" || f.shareUpload.PlaceHolder != "1 MiB/s (the default)" {
		t.Errorf("the field reads %q with placeholder %q; want it empty, naming the default of 1 MiB/s", f.shareUpload.Text, f.shareUpload.PlaceHolder)
	}
	for _, tc := range []struct {
		text      string
		kibps     int64
		perSecond int64
	}{
		{"unlimited", idle.ShareUploadUnlimited, 0},
		{"512 KiB/s", 512, 512 << 10},
		{"", 0, 1 << 20},
	} {
		f.shareUpload.SetText(tc.text)
		fx.tapSave()
		if f.saveErr.Visible() {
			t.Fatalf("%q: save failed: %s", tc.text, f.saveErr.Text)
		}
		got := fx.saved(t)
		if got.ShareUploadKiBps != tc.kibps || got.ShareUploadBytesPerSecond() != tc.perSecond {
			t.Errorf("%q saved as %d KiB/s, a cap of %d B/s; want %d, %d", tc.text, got.ShareUploadKiBps, got.ShareUploadBytesPerSecond(), tc.kibps, tc.perSecond)
		}
	}

	f.shareUpload.SetText("unlimited")
	fx.tapSave()
	again := newSettingsForm(t.Context(), f.u, fx.window)
	if again.shareUpload.Text != "unlimited" {
		t.Errorf("a saved unlimited cap shows as %q", again.shareUpload.Text)
	}
	f.shareUpload.SetText("10 KB/s")
	fx.tapSave()
	if !f.shareUploadErr.Visible() || !strings.Contains(f.shareUploadErr.Text, "or empty for the default") {
		t.Errorf("a rate too low says %q", f.shareUploadErr.Text)
	}
}
