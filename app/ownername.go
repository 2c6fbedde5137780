package app

import (
	"errors"
	"fmt"
	"io/fs"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/widget"

	"idlepool/identity"
	"idlepool/offers"
)

// ownerBox is the "Your name in pools" part of the Pools tab: the owner's
// display name and link (identity.Profile), signed with the owner key and
// written beside it when the person presses "Sign and save", as `idlepool
// owner set-name` does. The engine sends it to the pools when it next
// registers with them (it reads the file again within a minute).
type ownerBox struct {
	u      *UI
	name   *widget.Entry
	link   *widget.Entry
	err    *widget.Label
	status *widget.Label
	save   *widget.Button
	box    fyne.CanvasObject
}

// newOwnerBox returns the section, or nil when the app was given no owner
// key (Deps.Owner).
func newOwnerBox(u *UI) *ownerBox {
	k := u.deps.Owner
	if k == nil || u.deps.OwnerProfile == "" {
		return nil
	}
	b := &ownerBox{u: u, name: widget.NewEntry(), link: widget.NewEntry(), err: newErrorLabel(), status: widget.NewLabel("")}
	b.name.SetPlaceHolder("Ada's lab")
	b.link.SetPlaceHolder("https://example.org/ada (optional)")
	b.status.Wrapping = fyne.TextWrapWord
	p, err := identity.LoadProfile(u.deps.OwnerProfile, k.ID())
	switch {
	case err == nil:
		b.name.SetText(p.Name)
		b.link.SetText(p.Link)
	case !errors.Is(err, fs.ErrNotExist):
		setError(b.err, fmt.Sprintf("The name kept is not used: %v. Give it again and press Sign and save.", err))
	}
	b.save = widget.NewButton("Sign and save", b.sign)
	form := container.New(layout.NewFormLayout(),
		widget.NewLabel("Display name"), b.name,
		widget.NewLabel("Link"), b.link,
	)
	b.box = container.NewVBox(
		heading("Your name in pools"),
		hint(fmt.Sprintf("Pools and donors see this name beside your owner ID (%s), never instead of it: anyone may choose any name. It is signed with your owner key and reaches your pools within a minute.",
			offers.ShortID(k.ID()))),
		form,
		b.err,
		container.NewHBox(b.save),
		b.status,
	)
	return b
}

// sign checks the name and link, signs the profile with the owner key and
// saves it; a name or link that is refused is said under the fields and
// nothing is written. UI goroutine.
func (b *ownerBox) sign() {
	d := b.u.deps
	p, err := identity.NewProfile(d.Owner, b.name.Text, b.link.Text, d.now())
	if pe, ok := errors.AsType[*identity.ProfileError](err); ok {
		what := "name"
		if pe.Field == "link" {
			what = "link"
		}
		setError(b.err, fmt.Sprintf("The %s is refused: it %s.", what, pe.Problem))
		b.status.SetText("")
		return
	}
	if err == nil {
		err = identity.SaveProfile(d.OwnerProfile, p)
	}
	if err != nil {
		setError(b.err, fmt.Sprintf("Could not save the name: %v", err))
		b.status.SetText("")
		return
	}
	setError(b.err, "")
	b.status.SetText(fmt.Sprintf("Saved: your pools show %q beside your owner ID from their next registration.", p.Name))
}
