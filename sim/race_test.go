//go:build race

package sim

// raceEnabled: the race detector slows the simulation several times over,
// so go test -race runs fewer seeds by default.
const raceEnabled = true
