package release

import "errors"

// Sentinels of the package. Each refusal of a release wraps one of them;
// Words turns any of them into a sentence for people.
var (
	// ErrTampered: a downloaded file's length or digest differs from the
	// signed metadata's.
	ErrTampered = errors.New("release: file does not match its signed digest")
	// ErrBadSignature: metadata is not signed by enough of the keys the
	// trusted root names for its role.
	ErrBadSignature = errors.New("release: metadata not signed by the release keys")
	// ErrExpired: metadata is past its expiry (the server may be frozen
	// at an old state).
	ErrExpired = errors.New("release: metadata expired")
	// ErrRollback: metadata is older than metadata trusted before.
	ErrRollback = errors.New("release: metadata older than trusted")
	// ErrTooLarge: a download is longer than its signed length or than
	// Source.MaxBytes.
	ErrTooLarge = errors.New("release: download too large")
	// ErrStalled: the server sent nothing for Source.StallTimeout.
	ErrStalled = errors.New("release: download stalled")
	// ErrNoRelease: the release has no file for this platform and kind.
	ErrNoRelease = errors.New("release: no file for this platform")
	// ErrBadRelease: a release's files or metadata are malformed (a
	// target without a version, a tarball without the programs).
	ErrBadRelease = errors.New("release: malformed release")
	// ErrBadKeys: a keys directory is incomplete or holds a bad key.
	ErrBadKeys = errors.New("release: bad keys")
	// ErrNoChangelog: CHANGELOG.md has no section for the version.
	ErrNoChangelog = errors.New("release: changelog does not describe the version")
)

// Words says err, a refusal of Source or Updater, in a plain sentence
// for the tray and `idlepool status` ("the update was refused: a file
// does not match its signed digest; the installed version is kept").
// Errors of no sentinel of this package give "".
func Words(err error) string {
	kept := "; idlepool keeps the version installed"
	switch {
	case errors.Is(err, ErrTampered):
		return "the update was refused: a downloaded file does not match its signed digest" + kept
	case errors.Is(err, ErrBadSignature):
		return "the update was refused: its metadata is not signed by idlepool's release keys" + kept
	case errors.Is(err, ErrExpired):
		return "the update was refused: the release server's signed metadata has expired (the server may be stuck at an old state)" + kept
	case errors.Is(err, ErrRollback):
		return "the update was refused: the release server offers older metadata than it did before" + kept
	case errors.Is(err, ErrTooLarge):
		return "the update was refused: the download is larger than the release says" + kept
	case errors.Is(err, ErrStalled):
		return "the update did not download: the release server stopped sending" + kept
	case errors.Is(err, ErrNoRelease):
		return "the release has no file for this computer" + kept
	case errors.Is(err, ErrBadRelease):
		return "the release is malformed" + kept
	}
	return ""
}
