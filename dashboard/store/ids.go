package store

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// idAlphabet is Crockford's base32 in lower case (no i, l, o, u): IDs sort
// in creation order and are safe in URLs and file names.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// Limits of names and keys.
const (
	// MaxNameLen is the longest run name, in characters.
	MaxNameLen = 128
	// MaxExperimentNameLen is the longest experiment name, in characters
	// (MLflow's limit).
	MaxExperimentNameLen = 500
	// MaxKeyLen is the longest metric, param or tag key, in bytes.
	MaxKeyLen = 250
	// MaxTagValueLen is the longest run tag value, in characters (MLflow's
	// limit).
	MaxTagValueLen = 8000
	// MaxExperimentTagValueLen is the longest experiment tag value, in
	// characters (MLflow's limit).
	MaxExperimentTagValueLen = 20000
	// MaxArtifactLocationLen is the longest experiment artifact location.
	MaxArtifactLocationLen = 4096
	// MaxIDLen is the longest client-chosen run ID.
	MaxIDLen = 64
)

// NewID returns a 16-character ID: 48 bits of Unix milliseconds then 32
// random bits, in lower-case Crockford base32, so IDs sort by creation time.
func NewID() string {
	var b [10]byte
	binary.BigEndian.PutUint64(b[0:8], uint64(time.Now().UnixMilli())<<16)
	if _, err := rand.Read(b[6:10]); err != nil {
		panic(fmt.Sprintf("store: reading random bytes: %v", err))
	}
	// 80 bits -> 16 characters of 5 bits.
	var out [16]byte
	var acc uint64
	bits := 0
	j := 0
	for _, c := range b {
		acc = acc<<8 | uint64(c)
		bits += 8
		for bits >= 5 {
			bits -= 5
			out[j] = idAlphabet[(acc>>uint(bits))&31]
			j++
		}
	}
	return string(out[:])
}

// ValidateID checks an ID chosen by a client (run IDs): 1 to 64 characters
// of a-z, 0-9, '-' and '_', starting with a letter or digit. Such IDs are
// safe as URL path segments and file names.
func ValidateID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("id must be 1 to %d characters", MaxIDLen)
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (i > 0 && (r == '-' || r == '_'))
		if !ok {
			return fmt.Errorf("id %q: only a-z, 0-9, '-' and '_' (not first) are allowed", id)
		}
	}
	return nil
}

// NameRune reports whether r may appear in a name (see ValidateName).
func NameRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(" ._-/:+=@", r)
}

// ValidateName checks an experiment or run name: 1 to 128 characters of
// Unicode letters and digits, space, '.', '_', '-', '/', ':', '+', '=', '@',
// not starting or ending with a space and not starting with '.'.
func ValidateName(name string) error {
	n := utf8.RuneCountInString(name)
	if n == 0 || n > MaxNameLen || !utf8.ValidString(name) {
		return fmt.Errorf("name must be 1 to %d characters of valid UTF-8", MaxNameLen)
	}
	if strings.HasPrefix(name, " ") || strings.HasSuffix(name, " ") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("name %q must not start or end with a space or start with '.'", name)
	}
	for _, r := range name {
		if NameRune(r) {
			continue
		}
		return fmt.Errorf("name %q: character %q is not allowed (letters, digits, space and . _ - / : + = @)", name, r)
	}
	return nil
}

// ValidateExperimentName checks an experiment name: 1 to 500 characters of
// valid UTF-8 without control characters. It is wider than ValidateName
// (run names) because MLflow's clients name experiments freely
// ("resnet (baseline)", "run #1"); an experiment name is data (a column, a
// JSON string), never a path. Training jobs, which pass it on a command
// line, still check it with ValidateName.
func ValidateExperimentName(name string) error {
	n := utf8.RuneCountInString(name)
	if n == 0 || n > MaxExperimentNameLen || !utf8.ValidString(name) {
		return fmt.Errorf("name must be 1 to %d characters of valid UTF-8", MaxExperimentNameLen)
	}
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("name %q is blank", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("name %q contains control character %q", name, r)
		}
	}
	return nil
}

// ValidateTagValue checks a tag value: valid UTF-8 of at most max
// characters (MLflow counts characters) without NUL, which PostgreSQL's
// text cannot hold. Newlines and other characters are kept as sent:
// MLflow's Markdown notes (mlflow.note.content) are multi-line.
func ValidateTagValue(v string, max int) error {
	if !utf8.ValidString(v) {
		return errors.New("value is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(v); n > max {
		return fmt.Errorf("value is %d characters long; the limit is %d", n, max)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return errors.New("value contains a NUL character")
	}
	return nil
}

// ValidateKey checks a metric, param or tag key: 1 to 250 bytes of valid
// UTF-8 without control characters.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("key must be 1 to %d bytes", MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("key %q is not valid UTF-8", key)
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("key %q contains a control character", key)
		}
	}
	return nil
}

// validateText checks free text such as a tag value: valid UTF-8, at most
// max bytes, no control characters but tab (and newline when lines is set).
func validateText(s string, max int, lines bool) error {
	if len(s) > max {
		return fmt.Errorf("value longer than %d bytes", max)
	}
	if !utf8.ValidString(s) {
		return errors.New("value is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\t' && !(lines && (r == '\n' || r == '\r')) {
			return fmt.Errorf("value contains control character %q", r)
		}
	}
	return nil
}

// ValidateRelPath checks a path reported by a client (checkpoint, artifact):
// relative, slash-separated, clean (no "." or ".." elements, no empty
// elements), no backslashes or control characters, at most 1024 bytes.
func ValidateRelPath(p string) error {
	if p == "" || len(p) > 1024 {
		return errors.New("path must be 1 to 1024 bytes")
	}
	if err := validateText(p, 1024, false); err != nil {
		return fmt.Errorf("path %q: %w", p, err)
	}
	if strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || filepath.IsAbs(p) {
		return fmt.Errorf("path %q must be relative and use '/'", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("path %q must be clean (no empty, '.' or '..' elements)", p)
		}
	}
	return nil
}

// SafeJoin joins root and the client-supplied relative path rel, refusing
// absolute paths, ".." escapes and, where the files exist, symbolic links
// that resolve outside root. The result is root-prefixed and cleaned.
func SafeJoin(root, rel string) (string, error) {
	if root == "" {
		return "", errors.New("safejoin: empty root")
	}
	if err := ValidateRelPath(rel); err != nil {
		return "", fmt.Errorf("safejoin: %w", err)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("safejoin: resolving root %q: %w", root, err)
	}
	joined := filepath.Join(absRoot, filepath.FromSlash(rel))
	if !within(absRoot, joined) {
		return "", fmt.Errorf("safejoin: %q escapes %q", rel, root)
	}
	// Resolve symlinks on the longest existing prefix of the path.
	realRoot, err := filepath.EvalSymlinks(absRoot)
	if err != nil {
		if os.IsNotExist(err) {
			return joined, nil
		}
		return "", fmt.Errorf("safejoin: resolving root %q: %w", root, err)
	}
	probe := joined
	for {
		real, err := filepath.EvalSymlinks(probe)
		if err == nil {
			if !within(realRoot, real) {
				return "", fmt.Errorf("safejoin: %q resolves outside %q through a symbolic link", rel, root)
			}
			break
		}
		if !os.IsNotExist(err) {
			return "", fmt.Errorf("safejoin: resolving %q: %w", probe, err)
		}
		// A dangling symlink at probe would be followed on create: refuse it.
		if fi, lerr := os.Lstat(probe); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return "", fmt.Errorf("safejoin: %q is a dangling symbolic link", rel)
		}
		parent := filepath.Dir(probe)
		if parent == probe || !within(absRoot, parent) {
			break
		}
		probe = parent
	}
	return joined, nil
}

func within(root, p string) bool {
	if p == root {
		return true
	}
	return strings.HasPrefix(p, strings.TrimSuffix(root, string(filepath.Separator))+string(filepath.Separator))
}
