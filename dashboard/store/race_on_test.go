//go:build race

package store

// raceDetector: this test binary is built with -race, which instruments
// modernc's SQLite (Go code) as well and makes a query about 25 times
// slower; the keyset property tests sample fewer cases then (every sort
// and order on one experiment, unfiltered, pages of 40). Their whole
// product runs without -race: go test ./dashboard/store.
const raceDetector = true
