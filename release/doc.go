// Package release makes signed idlepool releases and keeps an installed
// idlepool up to date from them.
//
// A release is a set of files (targets: the Linux tarball, the Debian
// package, the Windows installer) and metadata in the form of The Update
// Framework (TUF, https://theupdateframework.io/, specification 1.0):
// root (the keys of every role, its own with a threshold of signatures),
// targets (each file's length, SHA-256 and custom fields: version, kind,
// OS, architecture, notes), snapshot and timestamp, each signed and each
// with an expiry. Publish writes such a repository; Source reads one with
// go-tuf's client (github.com/theupdateframework/go-tuf/v2), which refuses
// metadata signed by the wrong keys, expired metadata (a frozen server),
// metadata older than what it trusted before (a rollback) and files whose
// length or digest differ from the signed ones.
//
// The layout of a release directory, as published and served:
//
//	metadata/1.root.json, root.json     the root, by version
//	metadata/N.targets.json, N.snapshot.json, timestamp.json
//	targets/SHA256.NAME                  each file under its digest
//
// RotateRoot moves a repository to new keys (root N+1 signed by the
// thresholds of root N and of itself), which clients follow at their
// next check: TUF's chain of roots.
//
// Updating (Updater) checks a Source at most once a day with jitter,
// downloads the newest release for this platform to a side path, and
// installs it only when told no task runs: for a user install from the
// tarball it replaces the programs atomically, keeping the previous ones
// for one rollback; for the Debian package it tells the person; on
// Windows it runs the new installer silently for the user.
//
// A Source is not safe for concurrent use; an Updater serialises its own
// use of one.
package release
