package identity

import (
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrBadProfile marks an owner profile that cannot be used: a name or link
// that is refused, or a signature that does not verify. A *ProfileError
// says which, for people.
var ErrBadProfile = errors.New("identity: bad owner profile")

// Limits of an owner profile.
const (
	// MaxNameChars is the most characters (Unicode code points) of an
	// owner's display name.
	MaxNameChars = 64
	// MaxLinkBytes is the longest link an owner or a job may give.
	MaxLinkBytes = 256
)

// ProfileFile is the file beside an owner's keys that holds the owner's
// signed profile (Profile as JSON), in the config directory.
const ProfileFile = "owner-profile.json"

// Profile is what an owner says about itself: a display name and a link,
// signed with the owner key. Anyone can check it: Key is the owner's
// public key, Owner its ID (IDOf(Key)) and Sig the key's Ed25519
// signature over Message(). A name is shown to people beside the owner
// ID, as given; it never stands for the ID (two owners may give the same
// name), so nothing is decided by it.
//
// JSON: the field tags below; Key and Sig standard base64, Issued RFC 3339.
type Profile struct {
	Owner string `json:"owner"`
	Key   []byte `json:"key"`
	// Name is the display name, 1..MaxNameChars characters with no
	// control characters and no spaces at either end (CheckName).
	Name string `json:"name"`
	// Link is an https URL about the owner, or "" (CheckLink).
	Link string `json:"link,omitempty"`
	// Issued is when the owner signed it; of two profiles of one owner the
	// later one holds.
	Issued time.Time `json:"issued"`
	Sig    []byte    `json:"sig"`
}

// ProfileError says what is wrong with an owner profile, for people:
// Field is "name", "link", "signature" or "owner". It matches
// ErrBadProfile.
type ProfileError struct {
	Field   string
	Problem string
}

func (e *ProfileError) Error() string { return "owner profile: " + e.Field + " " + e.Problem }

// Is reports whether target is ErrBadProfile.
func (e *ProfileError) Is(target error) bool { return target == ErrBadProfile }

// CheckName returns nil when name may be an owner's display name: valid
// UTF-8, 1 to MaxNameChars characters, no control or bidirectional
// formatting characters (which could disguise what is shown next to it),
// no line breaks and no spaces at either end. Otherwise a *ProfileError
// naming the problem.
func CheckName(name string) error {
	bad := func(format string, args ...any) error {
		return &ProfileError{Field: "name", Problem: fmt.Sprintf(format, args...)}
	}
	switch n := utf8.RuneCountInString(name); {
	case !utf8.ValidString(name):
		return bad("is not valid UTF-8 text")
	case strings.TrimSpace(name) == "":
		return bad("is empty; give a name people will recognise, such as \"Ada's lab\"")
	case n > MaxNameChars:
		return bad("has %d characters; at most %d", n, MaxNameChars)
	case strings.TrimSpace(name) != name:
		return bad("%q begins or ends with a space; remove it", name)
	}
	if i := strings.IndexFunc(name, displayUnsafe); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		return bad("holds the control character %U at byte %d; a name is one line of visible text", r, i)
	}
	return nil
}

// displayUnsafe reports whether r must not appear in a name shown to
// people: control characters (Cc), line and paragraph separators, and the
// bidirectional formatting characters (Unicode TR #9) that reorder the
// text around them.
func displayUnsafe(r rune) bool {
	switch {
	case unicode.IsControl(r), r == '\u2028', r == '\u2029':
		return true
	}
	return unicode.Is(unicode.Bidi_Control, r)
}

// CheckLink returns nil when link is "" or an absolute https URL with a
// host, no user name or password, no spaces or control characters and at
// most MaxLinkBytes bytes; otherwise a *ProfileError naming the problem.
func CheckLink(link string) error {
	if link == "" {
		return nil
	}
	bad := func(format string, args ...any) error {
		return &ProfileError{Field: "link", Problem: fmt.Sprintf(format, args...)}
	}
	if len(link) > MaxLinkBytes {
		return bad("is %d bytes; at most %d", len(link), MaxLinkBytes)
	}
	if strings.ContainsFunc(link, func(r rune) bool { return unicode.IsSpace(r) || displayUnsafe(r) }) {
		return bad("%q holds a space or a control character", link)
	}
	u, err := url.Parse(link)
	switch {
	case err != nil:
		return bad("%q is not a URL: %v", link, errors.Unwrap(err))
	case u.Scheme != "https":
		return bad("%q is not an https URL; want one such as https://example.org/lab", link)
	case u.Host == "" || u.Hostname() == "":
		return bad("%q names no host; want one such as https://example.org/lab", link)
	case u.User != nil:
		return bad("%q holds a user name before the host; give the address without it", link)
	}
	return nil
}

// NewProfile checks name and link (CheckName, CheckLink) and returns the
// profile of k's owner with them, issued at issued (kept to the
// millisecond, in UTC) and signed with k.
func NewProfile(k *Key, name, link string, issued time.Time) (Profile, error) {
	if err := CheckName(name); err != nil {
		return Profile{}, err
	}
	if err := CheckLink(link); err != nil {
		return Profile{}, err
	}
	pub := k.Public()
	p := Profile{Owner: IDOf(pub), Key: pub, Name: name, Link: link, Issued: issued.UTC().Truncate(time.Millisecond)}
	p.Sig = k.Sign(p.Message())
	return p, nil
}

// profileDomain separates a profile's signatures from every other
// signature an owner key makes.
const profileDomain = "idlepool/owner-profile/v1\x00"

// Message is what the owner key signs: profileDomain, then the owner ID,
// the name, the link and Issued (RFC 3339 with milliseconds, UTC), each as
// its length in bytes (unsigned varint, as encoding/binary writes it)
// followed by its bytes.
func (p Profile) Message() []byte {
	b := []byte(profileDomain)
	for _, f := range []string{p.Owner, p.Name, p.Link, p.Issued.UTC().Format("2006-01-02T15:04:05.000Z")} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// Verify checks p: Key is an Ed25519 public key, Owner is its ID, the name
// and link pass CheckName and CheckLink, and Sig verifies over Message.
// It returns a *ProfileError (matching ErrBadProfile) saying which fails.
func (p Profile) Verify() error {
	if len(p.Key) != ed25519.PublicKeySize {
		return &ProfileError{Field: "key", Problem: fmt.Sprintf("is %d bytes; an owner key is %d", len(p.Key), ed25519.PublicKeySize)}
	}
	if id := IDOf(p.Key); p.Owner != id {
		return &ProfileError{Field: "owner", Problem: fmt.Sprintf("%s is not the ID of the profile's key (%s)", p.Owner, id)}
	}
	if err := CheckName(p.Name); err != nil {
		return err
	}
	if err := CheckLink(p.Link); err != nil {
		return err
	}
	if err := Verify(p.Key, p.Message(), p.Sig); err != nil {
		return &ProfileError{Field: "signature", Problem: "does not verify with the owner's key: the profile was changed after it was signed, or signed with another key"}
	}
	return nil
}

// LoadProfile reads the profile file at path (JSON, as SaveProfile writes
// it) and checks that it verifies and is the profile of owner (an owner
// ID). A missing file gives an error satisfying errors.Is(err,
// os.ErrNotExist); a profile that does not verify, or is another owner's,
// an error matching ErrBadProfile that names the file.
func LoadProfile(path, owner string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read owner profile: %w", err)
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, &ProfileError{Field: "file", Problem: fmt.Sprintf("is not an owner profile: %v", err)})
	}
	if err := p.Verify(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Owner != owner {
		return nil, fmt.Errorf("%s: %w", path, &ProfileError{Field: "owner",
			Problem: fmt.Sprintf("%s is another owner than this device's (%s): the profile was copied without its owner key", p.Owner, owner)})
	}
	return &p, nil
}

// SaveProfile writes p to path as JSON, atomically (a temporary file
// renamed over it), mode 0644: a profile is public.
func SaveProfile(path string, p Profile) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("encode owner profile: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write owner profile: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".profile-*")
	if err != nil {
		return fmt.Errorf("write owner profile: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write owner profile %s: %w", path, err)
	}
	return nil
}
