//go:build !race

package worker

// raceEnabled says whether the race detector is on: wazero's optimizing
// compiler then takes about ten times longer.
const raceEnabled = false
