//go:build race

package main

// raceDetector: this test binary is built with -race, which multiplies
// memory; TestPeakMemoryPerRequest runs without it (make test-go).
const raceDetector = true
