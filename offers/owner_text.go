package offers

import "idlepool/identity"

// OwnerName returns the display name of owner (an owner ID) from p, the
// owner's signed profile as a pool served it: p's name when p is owner's
// and verifies (identity.Profile.Verify), else "". A profile that does not
// verify is not shown: a pool cannot put a name on someone else's ID.
func OwnerName(owner string, p *identity.Profile) string {
	if p == nil || p.Owner != owner || p.Verify() != nil {
		return ""
	}
	return p.Name
}

// OwnerLink is OwnerName's counterpart for the owner's link: p's link
// when p is owner's and verifies, else "".
func OwnerLink(owner string, p *identity.Profile) string {
	if OwnerName(owner, p) == "" {
		return ""
	}
	return p.Link
}

// OwnerLabel names an owner for people: the display name beside the
// short ID, "Ada's lab (idk3m9x2qa…)", or the short ID alone when the
// owner has no verified name (name ""). The ID is always shown: names
// are chosen by their owners and may repeat.
func OwnerLabel(owner, name string) string {
	if name == "" {
		return ShortID(owner)
	}
	return name + " (" + ShortID(owner) + ")"
}

// OwnerText is OwnerLabel of the owner of l with its profile's name.
func (l Listing) OwnerText() string { return OwnerLabel(l.Owner, OwnerName(l.Owner, l.OwnerProfile)) }
