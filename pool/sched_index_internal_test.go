package pool

// Every lease in this package's tests checks its job index against a walk
// of every open job (checkCandidates).
func init() { checkIndex = true }

// CheckIndex lets a test of many jobs turn the check off.
var CheckIndex = &checkIndex
