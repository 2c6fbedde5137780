// Package offers is the supply side of a pool: capacity offers (what a
// donor's machine offers and accepts, signed by its peer key), listings of
// jobs seeking compute, and matchmaking in both directions in the spirit of
// HTCondor's ClassAds (Raman, Livny and Solomon, "Matchmaking: Distributed
// Resource Management for High Throughput Computing", HPDC 1998): a job's
// requirements must hold for the offer and the offer's conditions for the
// job, with a human explanation for every mismatch.
package offers
