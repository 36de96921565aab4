package serving

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
)

// Keys are the API keys both front ends require (--api-keys-file,
// FW_API_KEYS), kept as SHA-256 sums and compared in constant time. The
// zero value holds none and requires none.
type Keys struct {
	sums [][sha256.Size]byte
}

// NewKeys makes the key set of keys.
func NewKeys(keys []string) Keys {
	var k Keys
	for _, key := range keys {
		k.sums = append(k.sums, sha256.Sum256([]byte(key)))
	}
	return k
}

// Required reports whether any key is configured.
func (k Keys) Required() bool { return len(k.sums) > 0 }

// KeyCheck is what Check found in an Authorization value.
type KeyCheck int

// The results of Check.
const (
	// KeyMissing: the value is not "Bearer <key>".
	KeyMissing KeyCheck = iota
	// KeyInvalid: a bearer token that is none of the keys.
	KeyInvalid
	// KeyValid: one of the keys.
	KeyValid
)

// Check reads an Authorization value, "Bearer KEY" (the scheme in any case,
// spaces around the key ignored), against the keys.
func (k Keys) Check(authorization []byte) KeyCheck {
	const prefix = "bearer "
	if len(authorization) <= len(prefix) || !bytes.EqualFold(authorization[:len(prefix)], []byte(prefix)) {
		return KeyMissing
	}
	sum := sha256.Sum256(bytes.TrimSpace(authorization[len(prefix):]))
	ok := 0
	for i := range k.sums {
		ok |= subtle.ConstantTimeCompare(sum[:], k.sums[i][:])
	}
	if ok == 1 {
		return KeyValid
	}
	return KeyInvalid
}
