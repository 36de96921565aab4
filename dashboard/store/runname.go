package store

import (
	"hash/fnv"
	"strconv"
)

// Words of generated run names: an adjective, a noun and a number, as W&B
// names runs ("brisk-river-42"), so a run started without a name is told
// apart at a glance. Plain lower-case ASCII, valid under ValidateName.
var (
	nameAdjectives = [...]string{"amber", "bold", "brave", "brisk", "calm", "clever", "cosmic", "crimson",
		"crisp", "dapper", "daring", "dawn", "deep", "eager", "early", "easy", "fancy", "fast", "fierce",
		"fluent", "fresh", "gentle", "giddy", "glad", "golden", "grand", "green", "happy", "hardy", "honest",
		"humble", "icy", "jolly", "keen", "kind", "lively", "lucky", "lunar", "mellow", "merry", "misty",
		"modest", "noble", "polar", "proud", "quick", "quiet", "rapid", "rosy", "royal", "rustic", "sage",
		"silent", "silver", "snowy", "solar", "spry", "stellar", "sunny", "swift", "tidy", "vivid", "warm", "wild"}
	nameNouns = [...]string{"aurora", "bay", "breeze", "brook", "canyon", "cedar", "cloud", "comet", "coral",
		"cosmos", "creek", "dawn", "delta", "dune", "ember", "field", "fjord", "flower", "forest", "frost",
		"galaxy", "glade", "glacier", "grove", "harbor", "haze", "hill", "island", "lake", "leaf", "meadow",
		"mesa", "moon", "morning", "mountain", "nebula", "oasis", "ocean", "orbit", "peak", "pine", "planet",
		"pond", "prairie", "rain", "reef", "ridge", "river", "sea", "shadow", "sky", "snow", "star", "storm",
		"stream", "sun", "sunset", "thunder", "tide", "valley", "wave", "willow", "wind", "wood"}
)

// RunName is the readable name a run gets when it is started without one:
// "adjective-noun-N", derived from its ID, so every replica and every replay
// of the same run_start gives the same name. The ID stays the run's key.
func RunName(id string) string {
	h := fnv.New64a()
	h.Write([]byte(id))
	v := h.Sum64()
	a := nameAdjectives[v%uint64(len(nameAdjectives))]
	v /= uint64(len(nameAdjectives))
	n := nameNouns[v%uint64(len(nameNouns))]
	v /= uint64(len(nameNouns))
	return a + "-" + n + "-" + strconv.FormatUint(v%999+1, 10)
}
