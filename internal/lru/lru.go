// Package lru is a weighted least-recently-used cache: entries have a
// weight (bytes, rows), and the least recently used are dropped to keep the
// total under a budget. It keeps things that are expensive to rebuild and
// cheap to hold, such as a decoded sample picture or a summarized file.
package lru

import (
	"container/list"
	"sync"
)

// Cache maps keys to values of a given weight. Safe for concurrent use;
// values are shared with every caller of Get, who must not modify them.
type Cache[K comparable, V any] struct {
	mu      sync.Mutex
	budget  int64
	used    int64
	order   *list.List // of *entry[K, V], most recently used first
	entries map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key    K
	value  V
	weight int64
}

// New returns a cache that holds at most budget in weight.
func New[K comparable, V any](budget int64) *Cache[K, V] {
	return &Cache[K, V]{budget: budget, order: list.New(), entries: map[K]*list.Element{}}
}

// Get returns the value of key and makes it the most recently used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*entry[K, V]).value, true
}

// Put keeps value under key (replacing what was there), then drops the
// least recently used entries over the budget; a value heavier than the
// whole budget is not kept.
func (c *Cache[K, V]) Put(key K, value V, weight int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		c.remove(e)
	}
	if weight > c.budget {
		return
	}
	c.entries[key] = c.order.PushFront(&entry[K, V]{key: key, value: value, weight: weight})
	c.used += weight
	for c.used > c.budget {
		c.remove(c.order.Back())
	}
}

// Len is how many entries the cache holds.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Used is the total weight held.
func (c *Cache[K, V]) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// remove drops e (the caller holds mu).
func (c *Cache[K, V]) remove(e *list.Element) {
	en := e.Value.(*entry[K, V])
	c.order.Remove(e)
	delete(c.entries, en.key)
	c.used -= en.weight
}
