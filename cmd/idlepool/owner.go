package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/pool"
)

// This file is `idlepool owner`: the owner ID of this device and the
// owner's signed profile (identity.Profile), the display name and link
// that pools show beside the ID.

const ownerHelp = `Usage:
  idlepool owner [--json]
  idlepool owner set-name NAME [--link URL]
  idlepool owner clear-link
  idlepool owner endorse DEVICE_KEY

Shows the owner this device belongs to: the owner ID (what pools know
you by; 'idlepool join' prints it) and the display name and link you gave
it. set-name gives the owner a display name (at most 64 characters, one
line) and, with --link, an https link (a lab's or a project's page); both
are signed with the owner key and sent to your pools when this device
registers with them, within a minute while 'idlepool join' or the tray app
runs. Pools and donors show the name beside your owner ID, never instead
of it: anyone may choose any name, the ID is what is yours.

set-name without --link keeps the link given before; clear-link removes
it. endorse prints the owner key and its endorsement of another device's
key (base64, as a browser tab's /join page shows it), on one line: paste
it into that page to link the browser to this owner. The profile lives in owner-profile.json beside owner.key: copy both to
your other devices, or give each the same name.

Flags:
`

// ownerDoc is the JSON of `idlepool owner`.
type ownerDoc struct {
	Owner   string            `json:"owner"`
	Profile *identity.Profile `json:"profile,omitempty"`
	File    string            `json:"file"`
	Problem string            `json:"problem,omitempty"` // why the profile kept is not used
}

func cmdOwner(_ context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool owner", ownerHelp)
	link := fs.String("link", "", "an https `URL` about the owner (set-name); \"\" keeps the one given before")
	ownerKey := fs.String("owner-key", "", "owner key `FILE` (default: owner.key in the config directory)")
	asJSON := fs.Bool("json", false, "print one JSON document")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	linkSet := false
	fs.Visit(func(f *flag.Flag) { linkSet = linkSet || f.Name == "link" })
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	_, owner, err := loadKeys(dirs, *ownerKey)
	if err != nil {
		return err
	}
	path := agent.OwnerProfilePath(dirs)
	cur, curErr := agent.LoadOwnerProfile(dirs, owner.ID())
	verb := ""
	if len(pos) > 0 {
		verb = pos[0]
	}
	switch {
	case verb == "" && len(pos) == 0:
		doc := ownerDoc{Owner: owner.ID(), Profile: cur, File: path}
		if curErr != nil {
			doc.Problem = curErr.Error()
		}
		if *asJSON {
			b, err := json.MarshalIndent(doc, "", "  ")
			if err != nil {
				return fmt.Errorf("encode owner: %w", err)
			}
			fmt.Fprintf(g.stdout, "%s\n", b)
			return nil
		}
		printOwner(g, doc)
		return nil
	case verb == "set-name" && len(pos) == 2:
		newLink := *link
		if !linkSet && cur != nil {
			newLink = cur.Link
		}
		return saveProfile(g, owner, path, pos[1], newLink)
	case verb == "clear-link" && len(pos) == 1:
		if cur == nil {
			return &userError{Msg: "the owner has no display name or link to change", Hint: "idlepool owner set-name \"Ada's lab\" --link https://example.org/ada", Cause: errUsage}
		}
		return saveProfile(g, owner, path, cur.Name, "")
	case verb == "endorse" && len(pos) == 2:
		dev, err := identity.ParsePublic(pos[1])
		if err != nil {
			return &userError{Msg: fmt.Sprintf("owner endorse: %q is not a device key", pos[1]),
				Hint: "give the base64 device key the browser's /join page shows", Cause: errUsage}
		}
		fmt.Fprintf(g.stdout, "%s %s\n", identity.EncodePublic(owner.Public()), base64.StdEncoding.EncodeToString(owner.Sign(pool.EndorsementMessage(dev))))
		return nil
	case verb == "endorse":
		fs.Usage()
		return &userError{Msg: "owner endorse needs one DEVICE_KEY", Hint: "idlepool owner endorse KEY (the key the browser's /join page shows)", Cause: errUsage}
	case verb == "set-name":
		fs.Usage()
		return &userError{Msg: "owner set-name needs one NAME (quote it when it has spaces)",
			Hint: "idlepool owner set-name \"Ada's lab\" --link https://example.org/ada", Cause: errUsage}
	}
	fs.Usage()
	return &userError{Msg: fmt.Sprintf("owner: unknown subcommand %q", verb), Hint: "'idlepool owner', or 'idlepool owner set-name NAME [--link URL]'", Cause: errUsage}
}

// saveProfile signs the profile of owner with name and link, now, and
// writes it to path.
func saveProfile(g *globals, owner *identity.Key, path, name, link string) error {
	p, err := identity.NewProfile(owner, name, link, g.now())
	if pe, ok := errors.AsType[*identity.ProfileError](err); ok {
		hint := "a name is one line of at most 64 characters, such as \"Ada's lab\""
		if pe.Field == "link" {
			hint = "a link is an https address, such as https://example.org/ada"
		}
		return &userError{Msg: fmt.Sprintf("the %s is refused: %s", pe.Field, pe.Problem), Hint: hint, Cause: errors.Join(err, errUsage)}
	}
	if err != nil {
		return err
	}
	if err := identity.SaveProfile(path, p); err != nil {
		return err
	}
	printOwner(g, ownerDoc{Owner: p.Owner, Profile: &p, File: path})
	fmt.Fprintln(g.stdout, "Your pools show it when this device next registers with them: within a minute while 'idlepool join' or the tray app runs.")
	return nil
}

// printOwner writes doc for people.
func printOwner(g *globals, doc ownerDoc) {
	fmt.Fprintf(g.stdout, "owner    %s\n", doc.Owner)
	switch {
	case doc.Problem != "":
		fmt.Fprintf(g.stdout, "name     (none: %s is not used: %s)\n", doc.File, doc.Problem)
		fmt.Fprintln(g.stdout, "hint: give the name again with 'idlepool owner set-name NAME', which signs it with this device's owner key")
	case doc.Profile == nil:
		fmt.Fprintln(g.stdout, "name     (none; pools show the owner ID alone)")
		fmt.Fprintln(g.stdout, "hint: idlepool owner set-name \"Ada's lab\" --link https://example.org/ada")
	default:
		fmt.Fprintf(g.stdout, "name     %s\n", doc.Profile.Name)
		if doc.Profile.Link != "" {
			fmt.Fprintf(g.stdout, "link     %s\n", doc.Profile.Link)
		}
		fmt.Fprintf(g.stdout, "signed   %s, in %s\n", doc.Profile.Issued.Local().Format("2006-01-02 15:04"), doc.File)
	}
}
