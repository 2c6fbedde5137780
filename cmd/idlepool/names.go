package main

import (
	"context"
	"strings"

	"idlepool/job"
	"idlepool/offers"
)

// jobAbout is the line under a job in `idlepool jobs`: what it asks of a
// GPU ("needs a GPU", "uses a GPU if you allow one"), its description
// (the first 100 characters, on one line) and its link, and the owner's
// link; "" when the job has none of them.
func jobAbout(l offers.Listing) string {
	var parts []string
	if g := l.GPUText(); g != "" {
		parts = append(parts, g)
	}
	if d := offers.PlainLine(l.Description, 100); d != "" {
		parts = append(parts, d)
	}
	if l.Link != "" {
		parts = append(parts, offers.PlainLine(l.Link, 256))
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
		return offers.PlainLine(name, 64) + " (" + owner + ")"
	}
	return owner
}
