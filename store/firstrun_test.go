package store_test

import (
	"context"
	"errors"
	"testing"

	"idlepool/idle"
)

func TestSettingsSaved(t *testing.T) {
	ctx := context.Background()
	l, _ := openLocal(t)
	saved, err := l.SettingsSaved(ctx)
	if err != nil || saved {
		t.Fatalf("new store: SettingsSaved = %v, %v; want false, nil", saved, err)
	}
	if _, err := l.UpdateSettings(ctx, func(s *idle.Settings) error { return errors.New("no") }); err == nil {
		t.Fatal("UpdateSettings with a failing change: want its error")
	}
	if saved, err := l.SettingsSaved(ctx); err != nil || saved {
		t.Fatalf("after a failed update: SettingsSaved = %v, %v; want false, nil", saved, err)
	}
	if err := l.SaveSettings(ctx, idle.Defaults()); err != nil {
		t.Fatal(err)
	}
	if saved, err := l.SettingsSaved(ctx); err != nil || !saved {
		t.Fatalf("after saving the defaults: SettingsSaved = %v, %v; want true, nil", saved, err)
	}
}
