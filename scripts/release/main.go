// Command release signs a release directory (make release, through
// scripts/release.sh): it adds files to the TUF repository in -dir,
// signed with the keys in -keys, with the notes of -version from
// CHANGELOG.md. Without -keys, it makes throwaway test keys in
// -test-keys (once) and says so in DIR/signing.txt.
//
// Usage:
//
//	go run ./scripts/release -dir DIR -version X.Y.Z [-keys DIR | -test-keys DIR] [-changelog FILE] PATH:KIND:OS:ARCH...
//	go run ./scripts/release -dir DIR -refresh [-keys DIR | -test-keys DIR]
//	go run ./scripts/release -dir DIR -init [-keys DIR | -test-keys DIR]
//	go run ./scripts/release -dir DIR -keys OLD -rotate-root NEW
//
// KIND is tarball, deb or windows-installer. -refresh re-signs the
// snapshot and timestamp (run it before the timestamp expires, 14 days);
// -init creates the repository's root, which the programs are then built
// to trust (make release passes it as RELEASE_ROOT). -rotate-root moves
// the repository to the keys in NEW (made with -test-keys NEW -init on a
// scratch directory, or by hand): a new root signed by the root keys in
// OLD and those in NEW, which installed programs follow (release.RotateRoot);
// it also renews the root's expiry (a year), with NEW the same as OLD.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"idlepool/release"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("release", flag.ContinueOnError)
	dir := fl.String("dir", "", "the release directory (the TUF repository)")
	ver := fl.String("version", "", "the release's version, X.Y.Z")
	keysDir := fl.String("keys", "", "the directory of the release keys (the operator's)")
	testKeys := fl.String("test-keys", "bin/release-test-keys", "where throwaway test keys are made when -keys is not given")
	changelog := fl.String("changelog", "CHANGELOG.md", "the changelog the notes come from")
	refresh := fl.Bool("refresh", false, "re-sign the snapshot and timestamp only")
	initOnly := fl.Bool("init", false, "create the repository's root (signed by the root keys) if it does not exist, and nothing else")
	rotate := fl.String("rotate-root", "", "move the repository to the keys in `DIR`: a new root signed by the old root keys (-keys) and the new ones, and the release on offer signed again with the new keys")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	keys, which, err := loadKeys(*keysDir, *testKeys)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, "signing.txt"), []byte(which+"\n"), 0o644); err != nil {
		return err
	}
	if *rotate != "" {
		next, err := release.LoadKeys(*rotate)
		if err != nil {
			return err
		}
		if err := release.RotateRoot(*dir, keys, next, release.PublishOptions{}); err != nil {
			return err
		}
		fmt.Printf("%s: a new root names the keys in %s; publish with -keys %s from now on\n", *dir, *rotate, *rotate)
		return nil
	}
	if *initOnly {
		return release.Init(*dir, keys, release.PublishOptions{})
	}
	if *refresh {
		return release.Refresh(*dir, keys, release.PublishOptions{})
	}
	log, err := os.ReadFile(*changelog)
	if err != nil {
		return err
	}
	notes, err := release.Notes(string(log), *ver)
	if err != nil {
		return err
	}
	var files []release.File
	for _, a := range fl.Args() {
		p := strings.Split(a, ":")
		if len(p) != 4 {
			return fmt.Errorf("file %q: want PATH:KIND:OS:ARCH", a)
		}
		files = append(files, release.File{Path: p[0], Kind: p[1], OS: p[2], Arch: p[3]})
	}
	if err := release.Publish(*dir, keys, files, release.PublishOptions{Version: *ver, Notes: notes}); err != nil {
		return err
	}
	fmt.Printf("release %s: %d files signed into %s (%s)\n", *ver, len(files), *dir, which)
	return nil
}

// loadKeys reads the operator's keys, or makes (once) and reads test keys.
func loadKeys(keysDir, testDir string) (release.Keys, string, error) {
	if keysDir != "" {
		k, err := release.LoadKeys(keysDir)
		return k, "signed with the release keys in " + keysDir, err
	}
	which := "signed with TEST keys (" + testDir + "): not for donors; give IDLEPOOL_RELEASE_KEYS for a real release"
	if _, err := os.Stat(filepath.Join(testDir, "targets.key")); errors.Is(err, fs.ErrNotExist) {
		k, err := release.GenerateKeys(2, 2)
		if err != nil {
			return release.Keys{}, "", err
		}
		if err := k.Save(testDir); err != nil {
			return release.Keys{}, "", err
		}
	}
	k, err := release.LoadKeys(testDir)
	return k, which, err
}
