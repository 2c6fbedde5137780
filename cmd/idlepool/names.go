package main

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"

	"idlepool/job"
	"idlepool/offers"
)

// oneLine makes text that came from a pool (a job's name or description,
// chosen by its owner) safe and short for a terminal: control and
// bidirectional formatting characters, which could move the cursor or
// reorder what is printed around them, become U+FFFD; runs of white space
// (line breaks included) become one space; and text past max characters
// is cut with "…".
func oneLine(text string, max int) string {
	text = strings.Join(strings.Fields(text), " ")
	text = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return utf8.RuneError
		}
		return r
	}, text)
	if utf8.RuneCountInString(text) <= max {
		return text
	}
	return string([]rune(text)[:max-1]) + "…"
}

// jobAbout is the line under a job in `idlepool jobs`: its description
// (the first 100 characters, on one line) and its link, and the owner's
// link; "" when the job has none of them.
func jobAbout(l offers.Listing) string {
	var parts []string
	if d := oneLine(l.Description, 100); d != "" {
		parts = append(parts, d)
	}
	if l.Link != "" {
		parts = append(parts, oneLine(l.Link, 256))
	}
	if ol := offers.OwnerLink(l.Owner, l.OwnerProfile); ol != "" {
		parts = append(parts, "owner: "+ol)
	}
	return strings.Join(parts, " · ")
}

// jobOwnerText names the owner of job id in the pool of s for `idlepool
// status`: its display name before its full ID when the pool has the
// owner's signed profile and it verifies, else the ID alone.
func jobOwnerText(ctx context.Context, s *session, id job.ID, owner string) string {
	info, err := s.c.JobInfo(ctx, id)
	if err != nil {
		return owner
	}
	if name := offers.OwnerName(owner, info.OwnerProfile); name != "" {
		return oneLine(name, 64) + " (" + owner + ")"
	}
	return owner
}
