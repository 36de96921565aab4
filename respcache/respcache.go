// Package respcache is Triton's response cache (--cache-config
// local,size=BYTES): the answers of models whose configuration enables it
// (response_cache { enable: true }), kept by a hash of the model version
// and the request, so that a request seen before is answered without
// running the model. It holds at most its byte budget, evicting the least
// recently used answers; an answer larger than the budget is not kept.
package respcache

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fw-serve/fw/engine"
)

// Key identifies a request: a SHA-256 of everything its answer depends on.
type Key [sha256.Size]byte

// KeyBuilder hashes a request's parts into a Key.
type KeyBuilder struct{ h hash.Hash }

// NewKey starts the key of a request to model version.
func NewKey(model, version string) *KeyBuilder {
	k := &KeyBuilder{h: sha256.New()}
	k.String(model)
	k.String(version)
	return k
}

// String adds a length-prefixed string.
func (k *KeyBuilder) String(s string) {
	var b [binary.MaxVarintLen64]byte
	k.h.Write(b[:binary.PutUvarint(b[:], uint64(len(s)))])
	k.h.Write([]byte(s))
}

// Tensors adds tensors: each one's presence, datatype, shape and bytes.
func (k *KeyBuilder) Tensors(ts []engine.Tensor) {
	var b [binary.MaxVarintLen64]byte
	put := func(v uint64) { k.h.Write(b[:binary.PutUvarint(b[:], v)]) }
	put(uint64(len(ts)))
	for _, t := range ts {
		if t.Absent() {
			put(0)
			continue
		}
		put(1)
		put(uint64(t.DType))
		put(uint64(len(t.Shape)))
		for _, d := range t.Shape {
			put(uint64(d))
		}
		put(uint64(len(t.Data)))
		k.h.Write(t.Data)
	}
}

// Ints adds integers (the outputs a request asks for).
func (k *KeyBuilder) Ints(xs []int) {
	var b [binary.MaxVarintLen64]byte
	k.h.Write(b[:binary.PutUvarint(b[:], uint64(len(xs)))])
	for _, x := range xs {
		k.h.Write(b[:binary.PutVarint(b[:], int64(x))])
	}
}

// Sum is the key.
func (k *KeyBuilder) Sum() Key {
	var out Key
	k.h.Sum(out[:0])
	return out
}

// entryOverhead is what an entry costs beyond its tensors' bytes.
const entryOverhead = 256

// Cache is the server's response cache, shared by the models that enable it.
type Cache struct {
	max int64
	gen atomic.Uint64

	mu      sync.Mutex
	used    int64
	lru     *list.List // of *entry, most recent first
	entries map[Key]*list.Element
}

type entry struct {
	key  Key
	out  []engine.Tensor
	size int64
}

// New returns a cache of at most maxBytes.
func New(maxBytes int64) *Cache {
	return &Cache{max: maxBytes, lru: list.New(), entries: map[Key]*list.Element{}}
}

// NextGeneration is a number no earlier call returned: a model version
// loaded again keys its answers under a new one, so that a reload (new
// weights, another configuration) never answers from the old load's.
func (c *Cache) NextGeneration() uint64 { return c.gen.Add(1) }

// Size is the byte budget.
func (c *Cache) Size() int64 { return c.max }

// Get returns the answer kept for k. Its tensors are the caller's to
// reshape (fresh Shape slices) but share their bytes with the cache: the
// caller must not write into Data.
func (c *Cache) Get(k Key) ([]engine.Tensor, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[k]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(el)
	e := el.Value.(*entry)
	out := make([]engine.Tensor, len(e.out))
	for i, t := range e.out {
		out[i] = t
		out[i].Shape = slices.Clone(t.Shape)
	}
	return out, true
}

// Put keeps a copy of out under k, evicting the least recently used
// answers to stay within the budget. An answer larger than the budget is
// not kept.
func (c *Cache) Put(k Key, out []engine.Tensor) {
	size := int64(entryOverhead)
	for _, t := range out {
		size += 64 + int64(len(t.Data)) + 8*int64(len(t.Shape)) // the tensor's header and its shape too
	}
	if size > c.max {
		return
	}
	kept := make([]engine.Tensor, len(out))
	for i, t := range out {
		kept[i] = t
		kept[i].Shape = slices.Clone(t.Shape)
		if t.Data != nil {
			kept[i].Data = slices.Clone(t.Data)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[k]; ok { // a concurrent miss kept it first
		c.lru.MoveToFront(el)
		return
	}
	for c.used+size > c.max {
		last := c.lru.Back()
		e := last.Value.(*entry)
		c.lru.Remove(last)
		delete(c.entries, e.key)
		c.used -= e.size
	}
	c.entries[k] = c.lru.PushFront(&entry{key: k, out: kept, size: size})
	c.used += size
}

// Len is the number of answers kept, Used their bytes.
func (c *Cache) Len() (n int, used int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.used
}
