// Package offers is the supply side of a pool: capacity offers (what a
// donor's machine offers and accepts, signed by its peer key), listings of
// jobs seeking compute, and matchmaking in both directions in the spirit of
// HTCondor's ClassAds (Raman, Livny and Solomon, "Matchmaking: Distributed
// Resource Management for High Throughput Computing", HPDC 1998): a job's
// requirements must hold for the offer and the offer's conditions for the
// job, with a human explanation for every mismatch.
//
// An agent builds its offer to each pool from the machine's capacity, the
// policy's state and the donor's preferences, signs it and publishes it
// before it expires; the coordinator verifies it with the peer's
// registered key and leases a task only where Match holds:
//
//	o := offers.Build(offers.Spec{Pool: info.Pool, PoolURL: url, Owner: owner.ID(),
//		Capacity: idle.NewCapacity(machine, settings, gpus), State: d.State, Hold: d.Hold,
//		Preferences: prefs, Issued: time.Now()})
//	o.Sign(deviceKey)
//	// coordinator side:
//	if err := o.Verify(peerKey, time.Now()); err != nil { ... }
//	if ok, why := offers.Match(o, listing, time.Now()); !ok { ... why[0] ... }
//
// An offer says whether the machine computes and, when it does not, a
// coarse hold (idle.Hold: for its owner, outside its hours, on battery, at
// a limit), never the policy's reason in words: everything another device
// reads of a donor is that coarse (DESIGN.md invariant 19).
//
// Everything here is pure (no I/O) and safe for concurrent use; values are
// plain data owned by the caller. Signatures cover the deterministic CBOR
// encoding of Offer.Canonical, domain-separated by "idlepool/offer/v1".
package offers
