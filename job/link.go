package job

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
)

// MaxLinkBytes is the longest link a manifest may give (the same bound as
// an owner's link, identity.MaxLinkBytes).
const MaxLinkBytes = 256

// CheckLink returns nil when link is "" or an absolute https URL with a
// host, no user name or password, no spaces or control characters and at
// most MaxLinkBytes bytes, the rule an owner's link follows too
// (identity.CheckLink); otherwise an error saying what is wrong. A link is
// shown to donors as the job's page, never opened by idlepool itself.
func CheckLink(link string) error {
	if link == "" {
		return nil
	}
	if len(link) > MaxLinkBytes {
		return fmt.Errorf("the link is %d bytes; at most %d", len(link), MaxLinkBytes)
	}
	if strings.ContainsFunc(link, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
	}) {
		return fmt.Errorf("the link %q holds a space or a control character", link)
	}
	u, err := url.Parse(link)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", link, errors.Unwrap(err))
	case u.Scheme != "https":
		return fmt.Errorf("%q is not an https URL; want one such as link = \"https://example.org/project\"", link)
	case u.Hostname() == "":
		return fmt.Errorf("%q names no host; want one such as link = \"https://example.org/project\"", link)
	case u.User != nil:
		return fmt.Errorf("%q holds a user name before the host; give the address without it", link)
	}
	return nil
}
