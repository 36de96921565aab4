package imageprep

import (
	"crypto/sha256"
	"encoding/json"

	"github.com/fw-serve/fw/internal/lru"
)

// SampleCache remembers what a recipe made of an image test case's sample
// picture, so that loading a file again (a model repository evicting and
// reloading a model, copies of one model under several names, a watched file
// reloaded) does not decode and preprocess the picture each time: for a
// 384x288 PNG that was half of a small model's load. Preprocessing is a pure
// function of the picture's bytes and the recipe, which together are the
// key, so a hit gives what a miss would compute; the model still runs on the
// tensor and its outputs are still compared at every load. The least
// recently used tensors are dropped to stay under a byte budget. Safe for
// concurrent use; the zero value is not usable (NewSampleCache).
type SampleCache struct {
	c *lru.Cache[[sha256.Size]byte, *sample]
}

// sample is one cached picture's decoding and preprocessing.
type sample struct {
	key           [sha256.Size]byte
	format        string
	width, height int
	x             []float32 // what the recipe made of the picture; never written after it is cached
}

// NewSampleCache returns a cache that holds at most budget bytes of
// preprocessed tensors (a sample larger than the budget is not kept).
func NewSampleCache(budget int64) *SampleCache {
	return &SampleCache{c: lru.New[[sha256.Size]byte, *sample](budget)}
}

// sampleKey names a picture (as its base64 text in the metadata) under a
// recipe.
func sampleKey(recipe any, imageB64 string) ([sha256.Size]byte, bool) {
	r, err := json.Marshal(recipe)
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	h := sha256.New()
	h.Write(r)
	h.Write([]byte{0})
	h.Write([]byte(imageB64))
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k, true
}

// get returns the cached sample for key, or nil. A nil cache holds nothing.
func (c *SampleCache) get(key [sha256.Size]byte) *sample {
	if c == nil {
		return nil
	}
	s, _ := c.c.Get(key)
	return s
}

// put keeps s, dropping the least recently used samples over the budget.
func (c *SampleCache) put(s *sample) {
	if c == nil {
		return
	}
	c.c.Put(s.key, s, int64(len(s.x))*4)
}

// Len is how many samples the cache holds.
func (c *SampleCache) Len() int { return c.c.Len() }
